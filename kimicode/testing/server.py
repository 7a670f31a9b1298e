"""A scripted fake OpenAI-compatible chat-completions server for offline tests.

`FakeServer` is a real HTTP/1.1 server bound to ``127.0.0.1`` on a free port, running in a
background thread.  Each ``POST /v1/chat/completions`` consumes the next item of a script
(`Reply`, `ErrorReply`, or a callable that builds one from the `RecordedRequest`) and answers the
way real servers do: server-sent events for ``"stream": true`` (chunked transfer encoding, one
event flushed at a time) or a plain ``chat.completion`` object otherwise.  Faults that real
providers produce — slow first byte, slow chunks, cut connections, malformed lines, mid-stream
error events, a missing ``[DONE]`` — can be scripted per reply, so agent loops and retry logic can
be tested without network.  Only the standard library is used.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import socketserver
import string
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, TypeAlias

__all__ = [
    "ErrorReply",
    "FakeServer",
    "RecordedRequest",
    "Reply",
    "ScriptItem",
    "ToolCall",
]

CHAT_PATH = "/v1/chat/completions"
EXHAUSTED_MESSAGE = "fake server: script exhausted"
_USAGE_MODES = ("chunk", "choice", "both", "none")
_ID_STYLES = ("kimi", "openai")
_ALNUM = string.ascii_letters + string.digits


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


@dataclass
class Reply:
    """One scripted successful response, plus optional faults to inject while streaming.

    The fault counters (``cut_after``, ``malformed_after``, ``error_after``) count JSON data
    events already sent; if the stream has fewer events than the counter, the fault fires just
    before ``[DONE]``.  ``error_after`` sends the error event, then ``[DONE]`` (unless ``omit_done``);
    ``chunk_delay`` and ``first_delay`` sleeps end early when the server stops.
    On a non-streaming request only ``first_delay``, ``cut_after`` (the body is truncated and the
    connection closed) and the content fields matter.
    """

    content: str | None = None
    reasoning: str | None = None
    reasoning_field: str = "reasoning_content"
    tool_calls: list[ToolCall] = field(default_factory=list)
    id_style: Literal["kimi", "openai"] = "kimi"
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    usage_mode: Literal["chunk", "choice", "both", "none"] = "chunk"
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
        for name in ("content", "reasoning", "finish_reason", "model"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"Reply.{name} must be a str or None, got {type(value).__name__}")
        if not isinstance(self.reasoning_field, str) or not self.reasoning_field:
            raise ValueError("Reply.reasoning_field must be a non-empty string")
        if self.id_style not in _ID_STYLES:
            raise ValueError(f"Reply.id_style must be one of {_ID_STYLES}, got {self.id_style!r}")
        if self.usage_mode not in _USAGE_MODES:
            raise ValueError(f"Reply.usage_mode must be one of {_USAGE_MODES}, got {self.usage_mode!r}")
        if self.usage is not None and not isinstance(self.usage, dict):
            raise TypeError(f"Reply.usage must be a dict or None, got {type(self.usage).__name__}")
        if not isinstance(self.tool_calls, list) or not all(isinstance(call, ToolCall) for call in self.tool_calls):
            raise TypeError("Reply.tool_calls must be a list of ToolCall")
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"Reply.chunk_size must be a positive int, got {self.chunk_size!r}")
        for name in ("chunk_delay", "first_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"Reply.{name} must be a non-negative number, got {value!r}")
        for name in ("cut_after", "malformed_after", "error_after"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
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
        return _error_body(self.message, self.type)


@dataclass
class RecordedRequest:
    """A request as the server received it (recorded before answering)."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any


ScriptItem: TypeAlias = Reply | ErrorReply | Callable[[RecordedRequest], Reply | ErrorReply]


def _error_body(message: str, type_: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": type_, "code": None}}).encode()


def _context_error(prompt: int, n_ctx: int) -> bytes:
    """llama.cpp's context-size error, as recorded from llama-server."""
    return json.dumps({"error": {
        "code": 400,
        "message": f"request ({prompt} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": prompt,
        "n_ctx": n_ctx,
    }}).encode()


def _split(text: str | None, size: int) -> list[str]:
    if not text:
        return []
    return [text[i : i + size] for i in range(0, len(text), size)]


def _check_item(item: object) -> None:
    if isinstance(item, Reply | ErrorReply) or callable(item):
        return
    raise TypeError(f"FakeServer script items must be Reply, ErrorReply or a callable, got {type(item).__name__}")


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer that tracks open connections so `FakeServer.stop` can sever them."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, fake: FakeServer) -> None:
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.handler_threads: set[threading.Thread] = set()
        self.track_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def server_bind(self) -> None:
        # Skip HTTPServer.server_bind: its socket.getfqdn() may do a slow reverse-DNS lookup.
        socketserver.TCPServer.server_bind(self)
        self.server_name = "127.0.0.1"
        self.server_port = int(self.server_address[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._run_connection,
            args=(request, client_address),
            daemon=True,
            name="fake-server-conn",
        )
        with self.track_lock:
            self.connections.add(request)
            self.handler_threads.add(thread)
        thread.start()

    def _run_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self.track_lock:
                self.connections.discard(request)
                self.handler_threads.discard(threading.current_thread())

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up (or stop() severing them) are normal here; anything else is a bug
        # in the fake server, so let socketserver print it.
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError) or self.fake._stopping.is_set():
            return
        super().handle_error(request, client_address)

    def sever_all(self) -> None:
        """Shut down every open connection so blocked handler threads wake up at once."""
        with self.track_lock:
            conns = list(self.connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Abort(Exception):
    """Raised inside the handler to drop the connection without a clean response."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kimicode-fake/1.0"
    sys_version = ""
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    # ----- dispatch -------------------------------------------------------------------

    def do_POST(self) -> None:
        self._dispatch()

    def do_GET(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        fake = self.server.fake
        try:
            try:
                raw = self._read_body()
            except ValueError:
                self.close_connection = True
                self._send_bytes(
                    400, _error_body("fake server: malformed request body framing", "invalid_request_error")
                )
                return
            route = self.path.split("?", 1)[0]
            if self.command == "GET" and route in fake.get_routes:
                self._send_bytes(200, json.dumps(fake.get_routes[route]).encode())
                return
            if self.command != "POST" or route != CHAT_PATH:
                self._send_bytes(
                    404,
                    _error_body(f"fake server: no route for {self.command} {route}", "not_found_error"),
                )
                return
            headers = {name.lower(): value for name, value in self.headers.items()}
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = None
            request = RecordedRequest(method=self.command, path=self.path, headers=headers, raw=raw, body=body)
            fake._record(request)
            if fake.context_limit is not None and len(raw) // 4 > fake.context_limit:
                self._send_bytes(400, _context_error(len(raw) // 4, fake.context_limit))
                return  # refused like llama.cpp: no script item is used
            item = fake._next_item()
            if item is None:
                self._send_bytes(500, _error_body(EXHAUSTED_MESSAGE, "server_error"))
                return
            answer = self._resolve(item, request)
            if answer is None:
                return
            if isinstance(answer, ErrorReply):
                self._send_bytes(answer.status, answer.body_bytes(), answer.headers)
                return
            if answer.first_delay and fake._stopping.wait(answer.first_delay):
                raise _Abort
            stream = isinstance(body, dict) and body.get("stream") is True
            if stream:
                self._stream(answer, request)
            else:
                self._complete(answer, request)
        except _Abort:
            self._abort()
        except OSError:
            self.close_connection = True

    def _resolve(self, item: ScriptItem, request: RecordedRequest) -> Reply | ErrorReply | None:
        if isinstance(item, Reply | ErrorReply):
            return item
        try:
            answer = item(request)
        except Exception as exc:
            self._send_bytes(
                500,
                _error_body(f"fake server: script callable raised {type(exc).__name__}: {exc}", "server_error"),
            )
            return None
        if not isinstance(answer, Reply | ErrorReply):
            self._send_bytes(
                500,
                _error_body(
                    f"fake server: script callable returned {type(answer).__name__}, expected Reply or ErrorReply",
                    "server_error",
                ),
            )
            return None
        return answer

    # ----- I/O helpers ----------------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # Trailer section ends with an empty line.
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send_bytes(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        extra = headers or {}
        if not any(name.lower() == "content-type" for name in extra):
            self.send_header("Content-Type", "application/json")
        for name, value in extra.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _abort(self) -> None:
        """Drop the connection abruptly: no terminator, no further bytes."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    # ----- responses ------------------------------------------------------------------

    def _complete(self, reply: Reply, request: RecordedRequest) -> None:
        fake = self.server.fake
        ids = fake._assign_ids(reply)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.reasoning is not None:
            message[reply.reasoning_field] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_text()},
                }
                for call, call_id in zip(reply.tool_calls, ids, strict=True)
            ]
        payload: dict[str, Any] = {
            "id": _completion_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": _model_for(reply, request),
            "choices": [{"index": 0, "message": message, "finish_reason": reply.effective_finish_reason()}],
        }
        if reply.usage_mode != "none":
            payload["usage"] = _usage_for(reply, request)
        data = json.dumps(payload).encode()
        if reply.cut_after is not None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            raise _Abort
        self._send_bytes(200, data)

    def _stream(self, reply: Reply, request: RecordedRequest) -> None:
        fake = self.server.fake
        body = request.body if isinstance(request.body, dict) else {}
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        chunks = list(_stream_chunks(reply, request, fake._assign_ids(reply), include_usage))

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        for sent in range(len(chunks) + 1):
            if reply.malformed_after is not None and self._fires(reply.malformed_after, sent, len(chunks)):
                self._write_event(b"{not json")
            if reply.error_after is not None and self._fires(reply.error_after, sent, len(chunks)):
                error = {"error": {"message": reply.error_message, "type": "server_error"}}
                self._write_event(json.dumps(error).encode())
                break
            if reply.cut_after is not None and self._fires(reply.cut_after, sent, len(chunks)):
                raise _Abort
            if sent == len(chunks):
                break
            if sent > 0 and reply.chunk_delay and fake._stopping.wait(reply.chunk_delay):
                raise _Abort
            if fake._stopping.is_set():
                raise _Abort
            self._write_event(json.dumps(chunks[sent]).encode())
        if not reply.omit_done:
            self._write_event(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")

    @staticmethod
    def _fires(limit: int, sent: int, total: int) -> bool:
        """A fault fires once `limit` events went out, or just before the end if the stream is shorter."""
        return sent == min(limit, total)

    def _write_event(self, data: bytes) -> None:
        event = b"data: " + data + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))


def _completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def _model_for(reply: Reply, request: RecordedRequest) -> str:
    if reply.model is not None:
        return reply.model
    if isinstance(request.body, dict) and isinstance(request.body.get("model"), str):
        return str(request.body["model"])
    return "fake-model"


def _usage_for(reply: Reply, request: RecordedRequest) -> dict[str, Any]:
    if reply.usage is not None:
        return dict(reply.usage)
    text = (reply.reasoning or "") + (reply.content or "")
    text += "".join(call.name + call.arguments_text() for call in reply.tool_calls)
    prompt = len(request.raw) // 4
    completion = len(text) // 4
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _stream_chunks(
    reply: Reply, request: RecordedRequest, ids: list[str], include_usage: bool
) -> Iterator[dict[str, Any]]:
    """The JSON data events of one streamed reply, in wire order (without ``[DONE]``)."""
    chunk_id = _completion_id()
    created = int(time.time())
    model = _model_for(reply, request)

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        if include_usage:
            out["usage"] = None
        return out

    yield chunk({"role": "assistant", "content": ""})
    for piece in _split(reply.reasoning, reply.chunk_size):
        yield chunk({reply.reasoning_field: piece})
    for piece in _split(reply.content, reply.chunk_size):
        yield chunk({"content": piece})
    for index, (call, call_id) in enumerate(zip(reply.tool_calls, ids, strict=True)):
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        for piece in _split(call.arguments_text(), reply.chunk_size):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    final = chunk({}, reply.effective_finish_reason())
    usage = _usage_for(reply, request)
    if reply.usage_mode in ("choice", "both"):
        final["choices"][0]["usage"] = usage
    yield final
    if include_usage and reply.usage_mode in ("chunk", "both"):
        usage_chunk = chunk({})
        usage_chunk["choices"] = []
        usage_chunk["usage"] = usage
        yield usage_chunk


class FakeServer:
    """A scripted OpenAI-compatible server on ``127.0.0.1`` for tests (see module docstring).

    Use as a context manager, or call `start` and `stop`.  ``requests`` lists every
    ``POST /v1/chat/completions`` received, in order.
    """

    def __init__(self, script: Iterable[ScriptItem] = ()) -> None:
        items = list(script)
        for item in items:
            _check_item(item)
        self._script: deque[ScriptItem] = deque(items)
        self._lock = threading.Lock()
        self._requests_changed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._tool_call_counter = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.requests: list[RecordedRequest] = []
        self.context_limit: int | None = None
        """When set, a request whose prompt (body bytes / 4, as usage counts it) is over this many tokens
        is refused with llama.cpp's `exceed_context_size_error` (n_ctx = this limit)."""
        self.get_routes: dict[str, Any] = {}
        """JSON answered to `GET path` (e.g. `/v1/models`, `/props`) for window-discovery tests."""

    # ----- lifecycle ------------------------------------------------------------------

    def start(self) -> FakeServer:
        """Bind a free port and serve in a daemon thread; returns ``self``."""
        if self._stopping.is_set():
            raise RuntimeError("FakeServer cannot be restarted after stop(); create a new one")
        if self._server is not None:
            raise RuntimeError("FakeServer is already started")
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name=f"fake-server-{self.port}",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, sever open connections and wake sleeping replies (returns within ~1 s)."""
        server = self._server
        if server is None or self._stopping.is_set():
            self._stopping.set()
            return
        self._stopping.set()
        server.shutdown()
        server.sever_all()
        server.server_close()
        deadline = time.monotonic() + 0.5
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        with server.track_lock:
            threads = list(server.handler_threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ----- addresses ------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The TCP port the server listens on."""
        if self._server is None:
            raise RuntimeError("FakeServer is not started; call start() or use it as a context manager")
        return self._server.server_port

    @property
    def base_url(self) -> str:
        """The OpenAI ``base_url`` to give clients, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # ----- script and recording -------------------------------------------------------

    def add(self, *items: ScriptItem) -> None:
        """Append items to the script; safe to call while requests are being served."""
        for item in items:
            _check_item(item)
        with self._lock:
            self._script.extend(items)

    @property
    def remaining(self) -> int:
        """Number of script items not served yet."""
        with self._lock:
            return len(self._script)

    def wait_for_requests(self, n: int, timeout: float = 5) -> None:
        """Block until at least ``n`` chat requests were received; raise `TimeoutError` otherwise."""
        with self._requests_changed:
            ok = self._requests_changed.wait_for(lambda: len(self.requests) >= n, timeout)
            if not ok:
                raise TimeoutError(f"FakeServer: waited {timeout}s for {n} request(s), got {len(self.requests)}")

    def _record(self, request: RecordedRequest) -> None:
        with self._requests_changed:
            self.requests.append(request)
            self._requests_changed.notify_all()

    def _next_item(self) -> ScriptItem | None:
        with self._lock:
            return self._script.popleft() if self._script else None

    def _assign_ids(self, reply: Reply) -> list[str]:
        """Tool-call ids for one reply; the Kimi counter advances for every call served."""
        with self._lock:
            start = self._tool_call_counter
            self._tool_call_counter += len(reply.tool_calls)
        ids: list[str] = []
        for offset, call in enumerate(reply.tool_calls):
            if call.id is not None:
                ids.append(call.id)
            elif reply.id_style == "kimi":
                ids.append(f"functions.{call.name}:{start + offset}")
            else:
                ids.append("call_" + "".join(random.choices(_ALNUM, k=24)))
        return ids
