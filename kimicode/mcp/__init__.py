"""MCP client: servers from `.mcp.json` and the configuration, their tools as `mcp__SERVER__TOOL`.

Nothing here imports the `mcp` SDK at import time: it is loaded only when a server is configured.
"""
