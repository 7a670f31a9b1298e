"""Test helpers for kimicode and its users: a scripted fake OpenAI-compatible server.

`FakeServer` answers in the shape of a real server (``dialect=`` one of `DIALECTS`: moonshot,
openai, vllm, sglang, llamacpp, ollama, ollama-refuses, openrouter, deepseek, litellm; default
``kimicode``), refuses requests over ``context_window`` with that server's own context-length error,
and replays recordings byte for byte (`RawReply`).  See docs/testing.md and docs/servers.md.
Imports nothing else from kimicode.
"""

from kimicode.testing.dialects import DIALECTS, Dialect, ErrorKind, get_dialect
from kimicode.testing.replies import ErrorReply, RawReply, RecordedRequest, Reply, ScriptItem, ToolCall
from kimicode.testing.server import FakeServer
from kimicode.testing.websearch import web_search_flow

__all__ = [
    "DIALECTS",
    "Dialect",
    "ErrorKind",
    "ErrorReply",
    "FakeServer",
    "RawReply",
    "RecordedRequest",
    "Reply",
    "ScriptItem",
    "ToolCall",
    "get_dialect",
    "web_search_flow",
]
