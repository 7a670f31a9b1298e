"""What a `FakeServer` script is made of: scripted replies, HTTP errors, raw recordings, requests."""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

__all__ = ["ErrorReply", "RawReply", "RecordedRequest", "Reply", "ScriptItem", "ToolCall"]

_USAGE_MODES = ("chunk", "choice", "both", "none")
_ID_STYLES = ("kimi", "openai")
ALNUM = string.ascii_letters + string.digits


@dataclass
class ToolCall:
    """One tool call inside a scripted `Reply`.

    ``arguments`` given as a dict is sent as ``json.dumps(arguments)``; a string is sent verbatim,
    so it may be deliberately invalid JSON.  ``id`` overrides the id generated from
    `Reply.id_style`.
    """

    name: str
    arguments: str | dict[str, Any] = ""
    id: str | None = None
    type: str = "function"
    """``builtin_function`` for a call the server runs itself (Moonshot's ``$web_search``; `websearch.py`)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"ToolCall.name must be a str, got {type(self.name).__name__}")
        if not isinstance(self.arguments, str | dict):
            raise TypeError(f"ToolCall.arguments must be a str or dict, got {type(self.arguments).__name__}")
        if self.id is not None and not isinstance(self.id, str):
            raise TypeError(f"ToolCall.id must be a str or None, got {type(self.id).__name__}")

    def arguments_text(self) -> str:
        """The arguments exactly as they go on the wire."""
        if isinstance(self.arguments, dict):
            return json.dumps(self.arguments)
        return self.arguments


def _count(value: object) -> bool:
    """A non-negative int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass
class Reply:
    """One scripted successful response, plus optional faults to inject while streaming.

    The fault counters (``cut_after``, ``malformed_after``, ``error_after``) count JSON data
    events already sent; if the stream has fewer events than the counter, the fault fires just
    before ``[DONE]``.  ``error_after`` sends the error event, then ``[DONE]`` (unless ``omit_done``);
    ``chunk_delay`` and ``first_delay`` sleeps end early when the server stops.
    On a non-streaming request only ``first_delay``, ``cut_after`` (the body is truncated and the
    connection closed) and the content fields matter.

    ``reasoning_field``, ``id_style`` and ``usage_mode`` left at ``None`` follow the server's dialect
    (see `kimicode.testing.dialects`); set them to force one shape whatever the dialect.
    ``cached_tokens`` adds a prompt-cache hit count to the usage, placed where the dialect puts it.
    """

    content: str | None = None
    reasoning: str | None = None
    reasoning_field: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    id_style: Literal["kimi", "openai"] | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    usage_mode: Literal["chunk", "choice", "both", "none"] | None = None
    cached_tokens: int | None = None
    chunk_size: int = 7
    chunk_delay: float = 0.0
    first_delay: float = 0.0
    cut_after: int | None = None
    malformed_after: int | None = None
    error_after: int | None = None
    omit_done: bool = False
    model: str | None = None
    error_message: str = "fake server: injected mid-stream error"

    def __post_init__(self) -> None:
        self._check_kinds()
        self._check_numbers()

    def _check_kinds(self) -> None:
        """Strings, choices and containers: a misspelt script fails where it is written, not mid-test."""
        for name in ("content", "reasoning", "finish_reason", "model"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"Reply.{name} must be a str or None, got {type(value).__name__}")
        if self.reasoning_field is not None and (not isinstance(self.reasoning_field, str) or not self.reasoning_field):
            raise ValueError("Reply.reasoning_field must be a non-empty string or None")
        if self.id_style is not None and self.id_style not in _ID_STYLES:
            raise ValueError(f"Reply.id_style must be one of {_ID_STYLES}, got {self.id_style!r}")
        if self.usage_mode is not None and self.usage_mode not in _USAGE_MODES:
            raise ValueError(f"Reply.usage_mode must be one of {_USAGE_MODES}, got {self.usage_mode!r}")
        self._check_containers()

    def _check_containers(self) -> None:
        if self.usage is not None and not isinstance(self.usage, dict):
            raise TypeError(f"Reply.usage must be a dict or None, got {type(self.usage).__name__}")
        if not isinstance(self.tool_calls, list) or not all(isinstance(call, ToolCall) for call in self.tool_calls):
            raise TypeError("Reply.tool_calls must be a list of ToolCall")

    def _check_numbers(self) -> None:
        """Counts are ints (never bools), delays non-negative numbers."""
        if self.cached_tokens is not None and not _count(self.cached_tokens):
            raise ValueError(f"Reply.cached_tokens must be None or a non-negative int, got {self.cached_tokens!r}")
        if not _count(self.chunk_size) or self.chunk_size < 1:
            raise ValueError(f"Reply.chunk_size must be a positive int, got {self.chunk_size!r}")
        for name in ("chunk_delay", "first_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"Reply.{name} must be a non-negative number, got {value!r}")
        for name in ("cut_after", "malformed_after", "error_after"):
            value = getattr(self, name)
            if value is not None and not _count(value):
                raise ValueError(f"Reply.{name} must be None or a non-negative int, got {value!r}")

    def effective_finish_reason(self) -> str:
        """The finish reason sent: explicit, else ``tool_calls`` when there are calls, else ``stop``."""
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"


@dataclass
class ErrorReply:
    """An HTTP error response: ``status`` with ``headers`` and an OpenAI-style JSON error body.

    ``body`` replaces the JSON body with raw text (sent as-is, still labelled JSON).
    """

    status: int
    message: str = "error"
    type: str = "server_error"
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.status, bool) or not isinstance(self.status, int) or not 100 <= self.status <= 599:
            raise ValueError(f"ErrorReply.status must be an HTTP status code (100-599), got {self.status!r}")
        if not isinstance(self.headers, dict):
            raise TypeError("ErrorReply.headers must be a dict of str to str")

    def body_bytes(self) -> bytes:
        """The response body as sent."""
        if self.body is not None:
            return self.body.encode()
        return error_body(self.message, self.type)


@dataclass
class RawReply:
    """A response sent exactly as recorded: ``status``, ``headers`` and the body bytes, byte for byte.

    A streamed body (``text/event-stream``) goes out with chunked transfer encoding, one SSE event
    (up to and including its blank line) per flush, so a recording of a real server is replayed with
    the framing it had.  `RawReply.from_recording` reads a capture file: either a raw HTTP response
    (``HTTP/1.1 200 OK`` status line, headers, blank line, body) or a bare SSE body.
    """

    body: bytes
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/event-stream"})

    def __post_init__(self) -> None:
        if not isinstance(self.body, bytes):
            raise TypeError(f"RawReply.body must be bytes, got {type(self.body).__name__}")
        if isinstance(self.status, bool) or not isinstance(self.status, int) or not 100 <= self.status <= 599:
            raise ValueError(f"RawReply.status must be an HTTP status code (100-599), got {self.status!r}")

    @classmethod
    def from_recording(cls, path: str | Path) -> RawReply:
        """Load a capture: a raw HTTP response with headers, or a bare body (SSE if it has ``data:`` lines)."""
        data = Path(path).read_bytes()
        if not data.startswith(b"HTTP"):
            ctype = "text/event-stream" if data.lstrip().startswith(b"data:") else "application/json"
            return cls(body=data, headers={"Content-Type": ctype})
        sep = data.find(b"\r\n\r\n")
        lf = data.find(b"\n\n")
        if sep == -1 or (lf != -1 and lf < sep):
            head, body = data[:lf], data[lf + 2 :]
        else:
            head, body = data[:sep], data[sep + 4 :]
        lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
        parts = lines[0].split()
        if len(parts) < 2 or not parts[1].isdigit():
            raise ValueError(f"{path}: not an HTTP status line: {lines[0]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep_, value = line.partition(":")
            if sep_ and name.strip().lower() not in _HOP_HEADERS:
                headers[name.strip()] = value.strip()
        return cls(body=body, status=int(parts[1]), headers=headers)

    def is_stream(self) -> bool:
        """Whether the body is server-sent events (sent chunked, event by event)."""
        return any(k.lower() == "content-type" and "event-stream" in v for k, v in self.headers.items())

    def events(self) -> list[bytes]:
        """The body cut after each blank line, so joining the pieces gives the body back exactly."""
        pieces: list[bytes] = []
        start = 0
        body = self.body
        while start < len(body):
            end = body.find(b"\n\n", start)
            if end == -1:
                pieces.append(body[start:])
                break
            pieces.append(body[start : end + 2])
            start = end + 2
        return pieces


_HOP_HEADERS = frozenset({"transfer-encoding", "content-length", "connection", "keep-alive"})


@dataclass
class RecordedRequest:
    """A request as the server received it (recorded before answering)."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any
    tools_counted: bool = True
    """False when the server's template leaves the tool definitions out of its prompt count."""


ScriptItem: TypeAlias = Reply | ErrorReply | RawReply | Callable[[RecordedRequest], Reply | ErrorReply | RawReply]


def error_body(message: str, type_: str) -> bytes:
    """The fake server's own error body (OpenAI shape)."""
    return json.dumps({"error": {"message": message, "type": type_, "code": None}}).encode()


def split_text(text: str | None, size: int) -> list[str]:
    """`text` in pieces of `size` characters (none for empty text)."""
    if not text:
        return []
    return [text[i : i + size] for i in range(0, len(text), size)]


def check_item(item: object) -> None:
    """Refuse anything that cannot be a script item, when it is added rather than when it is served."""
    if isinstance(item, Reply | ErrorReply | RawReply) or callable(item):
        return
    raise TypeError(
        f"FakeServer script items must be Reply, ErrorReply or a callable (or a RawReply), got {type(item).__name__}"
    )
