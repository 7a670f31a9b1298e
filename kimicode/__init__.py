"""kimicode: a coding agent for kimi-k3 and any OpenAI-compatible endpoint.

Importing the package is cheap (not even `typing` is imported): the agent, the HTTP client and the
terminal UI load on first use.
"""

from __future__ import annotations

from kimicode._version import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from kimicode.agent.core import Agent, Approval, ApprovalRequest, RunResult
    from kimicode.session.store import SessionError, SessionInfo, list_sessions
    from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult
    from kimicode.tools.decorator import tool

__all__ = [
    "Agent",
    "Approval",
    "ApprovalRequest",
    "RunResult",
    "SessionError",
    "SessionInfo",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "__version__",
    "list_sessions",
    "tool",
]

_LAZY = {
    "Agent": "kimicode.agent.core",
    "RunResult": "kimicode.agent.core",
    "Approval": "kimicode.agent.core",
    "ApprovalRequest": "kimicode.agent.core",
    "SessionError": "kimicode.session.store",
    "SessionInfo": "kimicode.session.store",
    "list_sessions": "kimicode.session.store",
    "Tool": "kimicode.tools.base",
    "ToolContext": "kimicode.tools.base",
    "ToolError": "kimicode.tools.base",
    "ToolResult": "kimicode.tools.base",
    "tool": "kimicode.tools.decorator",
}


def __getattr__(name: str) -> Any:
    """Import public names lazily so `import kimicode` stays light."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kimicode' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
