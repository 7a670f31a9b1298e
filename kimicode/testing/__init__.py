"""Test helpers for kimicode and its users: a scripted fake OpenAI-compatible server.

See `FakeServer` and docs/testing.md for a complete pytest example.
"""

from kimicode.testing.server import ErrorReply, FakeServer, RecordedRequest, Reply, ScriptItem, ToolCall

__all__ = ["ErrorReply", "FakeServer", "RecordedRequest", "Reply", "ScriptItem", "ToolCall"]
