"""What a Claude Code (or Kimi Code) setup brings, read as it is: hooks, Agent Skills, custom subagents,
plugins and the places Claude Code keeps custom commands, plus the trust question that lets a project's
share of them in.

The package sits between the agent (which calls the hooks and offers the skill tool and the subagents)
and the MCP layer (a plugin's `.mcp.json` is read with the MCP configuration's own reader). Nothing here
imports the terminal; the faces ask the questions and print.
"""
