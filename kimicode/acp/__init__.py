"""The ACP face: kimicode as an Agent Client Protocol agent for editors (Zed, JetBrains IDEs, Neovim).

`kimicode acp` serves it over stdio (kimicode/acp/server.py). Sessions are ordinary kimicode sessions on
the same core as the terminal and `-p`: the core's typed events become ACP updates (updates.py), the one
permission engine asks through `session/request_permission` (approve.py), and when the editor offers
them, files and commands go through its `fs/*` and `terminal/*` methods (client_tools.py). See
docs/editors.md.
"""

from __future__ import annotations

__all__ = ["serve"]


async def serve(settings: dict[str, object] | None = None) -> int:
    """Serve ACP on stdin/stdout until the editor closes stdin (see kimicode/acp/server.py)."""
    from kimicode.acp.server import serve as run

    return await run(dict(settings or {}))
