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
    from kimicode.agent.options import AgentOptions
    from kimicode.errors import (
        AuthError,
        BadRequestError,
        CheckpointError,
        ConfigError,
        ContextLengthError,
        ErrorInfo,
        KimicodeError,
        ModelError,
        ProtocolError,
        QuotaError,
        RateLimitError,
        ServerUnavailableError,
        SessionError,
        ToolError,
        ToolTimeout,
        TurnError,
        UsageError,
    )
    from kimicode.llm.protocol import Completion, ModelClient, StreamDelta, StreamEvent, StreamRetry
    from kimicode.session.protocol import SessionStore
    from kimicode.session.store import SessionInfo, list_sessions
    from kimicode.tools.base import Tool, ToolContext, ToolResult
    from kimicode.tools.decorator import tool

__all__ = [
    "Agent",
    "AgentOptions",
    "Approval",
    "ApprovalRequest",
    "AuthError",
    "BadRequestError",
    "CheckpointError",
    "Completion",
    "ConfigError",
    "ContextLengthError",
    "ErrorInfo",
    "KimicodeError",
    "ModelClient",
    "ModelError",
    "ProtocolError",
    "QuotaError",
    "RateLimitError",
    "RunResult",
    "ServerUnavailableError",
    "SessionError",
    "SessionInfo",
    "SessionStore",
    "StreamDelta",
    "StreamEvent",
    "StreamRetry",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolTimeout",
    "TurnError",
    "UsageError",
    "__version__",
    "list_sessions",
    "read_only_command",
    "tool",
]

_LAZY = {
    "Agent": "kimicode.agent.core",
    "AgentOptions": "kimicode.agent.options",
    "RunResult": "kimicode.agent.core",
    "Approval": "kimicode.agent.core",
    "ApprovalRequest": "kimicode.agent.core",
    "SessionError": "kimicode.errors",
    "SessionInfo": "kimicode.session.store",
    "list_sessions": "kimicode.session.store",
    "ModelClient": "kimicode.llm.protocol",
    "Completion": "kimicode.llm.protocol",
    "StreamDelta": "kimicode.llm.protocol",
    "StreamEvent": "kimicode.llm.protocol",
    "StreamRetry": "kimicode.llm.protocol",
    "SessionStore": "kimicode.session.protocol",
    "read_only_command": "kimicode.permissions.engine",
    "Tool": "kimicode.tools.base",
    "ToolContext": "kimicode.tools.base",
    "ToolError": "kimicode.errors",
    "ToolResult": "kimicode.tools.base",
    "tool": "kimicode.tools.decorator",
    "AuthError": "kimicode.errors",
    "BadRequestError": "kimicode.errors",
    "CheckpointError": "kimicode.errors",
    "ConfigError": "kimicode.errors",
    "ContextLengthError": "kimicode.errors",
    "ErrorInfo": "kimicode.errors",
    "KimicodeError": "kimicode.errors",
    "ModelError": "kimicode.errors",
    "ProtocolError": "kimicode.errors",
    "QuotaError": "kimicode.errors",
    "RateLimitError": "kimicode.errors",
    "ServerUnavailableError": "kimicode.errors",
    "ToolTimeout": "kimicode.errors",
    "TurnError": "kimicode.errors",
    "UsageError": "kimicode.errors",
}


def __getattr__(name: str) -> Any:
    """Import public names lazily so `import kimicode` stays light."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kimicode' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
