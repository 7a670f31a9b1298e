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
import selectors
import socket
import socketserver
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kimicode.testing.dialects import Dialect, ErrorKind, get_dialect
from kimicode.testing.discovery import discovery_body
from kimicode.testing.kvcache import SharedKV
from kimicode.testing.replies import (
    ALNUM,
    ErrorReply,
    RawReply,
    RecordedRequest,
    Reply,
    ScriptItem,
    ToolCall,
    check_item,
    error_body,
)
from kimicode.testing.stream import completion_body, prompt_tokens, requested_completion, stream_chunks

__all__ = ["FakeServer"]

CHAT_PATH = "/v1/chat/completions"
EXHAUSTED_MESSAGE = "fake server: script exhausted"
_ = ToolCall  # re-exported for `from kimicode.testing.server import ToolCall` users


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer that tracks open connections so `FakeServer.stop` can sever them."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 1024  # the listen backlog (socketserver's 5 refused connections of 100 parallel clients)

    def __init__(self, fake: FakeServer) -> None:
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.handler_threads: set[threading.Thread] = set()
        self.track_lock = threading.Lock()
        self.wake_reader, self.wake_writer = socket.socketpair()
        super().__init__(("127.0.0.1", 0), _Handler)

    def serve(self) -> None:
        """Accept connections until `wake()`. It waits in select with no timeout: socketserver's serve_forever
        polls for its shutdown flag every `poll_interval`, so each stop() waited up to that long (~50 ms a test)."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.socket, selectors.EVENT_READ)
            selector.register(self.wake_reader, selectors.EVENT_READ)
            while not any(key.fileobj is self.wake_reader for key, _ in selector.select()):
                self.handle_request()  # the listening socket is readable: accepts without waiting

    def wake(self) -> None:
        """Make `serve()` return now."""
        with contextlib.suppress(OSError):
            self.wake_writer.send(b"\0")

    def server_close(self) -> None:
        super().server_close()
        self.wake_reader.close()
        self.wake_writer.close()

    def server_bind(self) -> None:
        # Skip HTTPServer.server_bind: its socket.getfqdn() may do a slow reverse-DNS lookup.
        socketserver.TCPServer.server_bind(self)
        self.server_name = "127.0.0.1"
        self.server_port = int(self.server_address[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        # Small SSE events written one by one: without TCP_NODELAY, Nagle's algorithm holds each one back
        # until the client's delayed ACK (~40 ms on Linux), which a benchmark would count as kimicode's time.
        with contextlib.suppress(OSError):
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.fake.connections_opened += 1  # only the serving thread accepts: no lock needed
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
                    400, error_body("fake server: malformed request body framing", "invalid_request_error")
                )
                return
            route = self.path.split("?", 1)[0]
            if fake.api_keys is not None and self._bearer() not in fake.api_keys:
                try:
                    refused = fake.dialect.error("auth")
                except ValueError:  # a dialect without its own: OpenAI's shape
                    refused = ErrorReply(401, "Incorrect API key provided", "invalid_api_key")
                self._send_bytes(refused.status, refused.body_bytes(), refused.headers)
                return
            if route != CHAT_PATH:
                with fake._lock:
                    fake.other_requests.append(f"{self.command} {route}")
            if self.command == "GET" and route in fake.get_routes:
                self._send_bytes(200, json.dumps(fake.get_routes[route]).encode())
                return
            whole = fake.context_window  # a unified KV cache gives each slot all of it: /props says so
            whole = whole * fake.slots if whole is not None and fake.kv.size is not None else whole
            found = discovery_body(
                fake.dialect,
                self.command,
                route,
                fake.served_model,
                whole,
                fake.slots,
                fake.tools_counted,
                f"b{fake.restarts}-fake",
            )
            if found is not None:
                self._send_bytes(200, found)
                return
            if self.command != "POST" or route != CHAT_PATH:
                self._send_bytes(
                    404,
                    error_body(f"fake server: no route for {self.command} {route}", "not_found_error"),
                )
                return
            headers = {name.lower(): value for name, value in self.headers.items()}
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = None
            request = RecordedRequest(
                method=self.command,
                path=self.path,
                headers=headers,
                raw=raw,
                body=body,
                tools_counted=fake.tools_counted,
            )
            fake._record(request)
            refusal = fake._over_window(request)
            if refusal is not None:
                self._send_bytes(refusal.status, refusal.body_bytes(), refusal.headers)
                return
            claimed = fake.kv.claim(prompt_tokens(request))  # llama.cpp's unified KV cache, shared by the slots
            if claimed is None:
                full = fake.kv.refusal()
                self._send_bytes(full.status, full.body_bytes(), full.headers)
                return
            try:
                self._answer(request, body)
            finally:
                fake.kv.release(claimed)
        except _Abort:
            self._abort()
        except OSError:
            self.close_connection = True

    def _answer(self, request: RecordedRequest, body: Any) -> None:
        """The scripted answer to a chat request that was accepted."""
        fake = self.server.fake
        item = fake._next_item()
        if item is None:
            self._send_bytes(500, error_body(EXHAUSTED_MESSAGE, "server_error"))
            return
        answer = self._resolve(item, request)
        if answer is None:
            return
        if isinstance(answer, ErrorReply):
            self._send_bytes(answer.status, answer.body_bytes(), answer.headers)
            return
        if isinstance(answer, RawReply):
            self._raw(answer)
            return
        if answer.first_delay and fake._stopping.wait(answer.first_delay):
            raise _Abort
        stream = isinstance(body, dict) and body.get("stream") is True
        if stream:
            self._stream(answer, request)
        else:
            self._complete(answer, request)

    def _bearer(self) -> str:
        auth = self.headers.get("Authorization") or ""
        return auth[7:] if auth.startswith("Bearer ") else ""

    def _resolve(self, item: ScriptItem, request: RecordedRequest) -> Reply | ErrorReply | RawReply | None:
        if isinstance(item, Reply | ErrorReply | RawReply):
            return item
        try:
            answer = item(request)
        except Exception as exc:
            self._send_bytes(
                500,
                error_body(f"fake server: script callable raised {type(exc).__name__}: {exc}", "server_error"),
            )
            return None
        if not isinstance(answer, Reply | ErrorReply | RawReply):
            self._send_bytes(
                500,
                error_body(
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
        payload = completion_body(reply, request, ids, fake.dialect, fake.context_window)
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
        ids = fake._assign_ids(reply)
        chunks = list(stream_chunks(reply, request, ids, include_usage, fake.dialect, fake.context_window))

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if fake.dialect.keepalive:
            self._write_chunk(fake.dialect.keepalive)

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
        self._write_chunk(b"data: " + data + b"\n\n")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _raw(self, reply: RawReply) -> None:
        """Send a recorded response: its status and headers, then its body byte for byte."""
        self.log_request(reply.status)
        self.send_response_only(reply.status)
        names = {name.lower() for name in reply.headers}
        if "server" not in names:
            self.send_header("Server", self.version_string())
        if "date" not in names:
            self.send_header("Date", self.date_time_string())
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if not reply.is_stream():
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in reply.events():
            if self.server.fake._stopping.is_set():
                raise _Abort
            self._write_chunk(piece)
        self.wfile.write(b"0\r\n\r\n")


class FakeServer:
    """A scripted OpenAI-compatible server on ``127.0.0.1`` for tests (see module docstring).

    Use as a context manager, or call `start` and `stop`.  ``requests`` lists every
    ``POST /v1/chat/completions`` received, in order.
    """

    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        dialect: str | Dialect = "kimicode",
        context_window: int | None = None,
        model: str = "fake-model",
    ) -> None:
        self.dialect: Dialect = get_dialect(dialect)
        """The server whose stream shape, ids, usage and errors this fake reproduces."""
        if context_window is not None and (
            isinstance(context_window, bool) or not isinstance(context_window, int) or context_window < 1
        ):
            raise ValueError(f"FakeServer context_window must be None or a positive int, got {context_window!r}")
        self.context_window = context_window
        """Requests over this many tokens (request bytes / 4) get the dialect's context error; None: no limit."""
        self.served_model = model
        """The model id the discovery endpoints (``/v1/models``, ``/props``) report."""
        self.context_limit: int | None = None
        """When set, a request whose prompt (body bytes / 4, as usage counts it) is over this many tokens
        is refused with llama.cpp's `exceed_context_size_error` (n_ctx = this limit), whatever the dialect."""
        self.slots = 1
        """llama.cpp's `--parallel`: each request gets `context_window // slots` tokens, as `/props` says."""
        self.tools_counted = True
        """False: the chat template leaves the tool definitions out of the prompt (and out of `prompt_tokens`), as
        SmolLM2's does on llama.cpp; `/props` says so in `chat_template_caps.supports_tools`."""
        self.kv = SharedKV()
        """llama.cpp's unified KV cache (its default layout): set `kv.size` and the requests in flight share that
        many tokens; one that finds no room gets HTTP 500 "Context size has been exceeded." (kvcache.py)."""
        self.restarts = 0
        """How many times `restart` was called (part of `/props` `build_info`, so clients see a new server)."""
        self.api_keys: set[str] | None = None
        """When set, a request (any route) whose `Authorization: Bearer` key is not in it gets the dialect's
        auth error (401), before anything else: a wrong key, as a real server refuses it."""
        self.get_routes: dict[str, Any] = {}
        """JSON answered to `GET path` (e.g. `/v1/models`, `/props`) for window-discovery tests; wins over
        the dialect's own discovery answers."""
        items = list(script)
        for item in items:
            check_item(item)
        self._script: deque[ScriptItem] = deque(items)
        self._lock = threading.Lock()
        self._requests_changed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._tool_call_counter = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.requests: list[RecordedRequest] = []
        self.tool_call_ids: list[str] = []
        """Every tool-call id sent, in order (so a test can check a client echoes them back exactly)."""
        self.connections_opened = 0
        """TCP connections accepted so far (a client that reuses its connections opens few)."""
        self.other_requests: list[str] = []
        """`METHOD /path` of every request that was not a chat completion (window discovery, mostly)."""
        """TCP connections accepted so far (a client that reuses its connections opens few)."""

    # ----- lifecycle ------------------------------------------------------------------

    def start(self) -> FakeServer:
        """Bind a free port and serve in a daemon thread; returns ``self``."""
        if self._stopping.is_set():
            raise RuntimeError("FakeServer cannot be restarted after stop(); create a new one")
        if self._server is not None:
            raise RuntimeError("FakeServer is already started")
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve,
            daemon=True,
            name=f"fake-server-{self.port}",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, sever open connections and wake sleeping replies: returns as soon as the threads have
        seen it (nothing polls), within 0.5 s even if a handler is stuck."""
        server = self._server
        if server is None or self._stopping.is_set():
            self._stopping.set()
            return
        self._stopping.set()
        server.wake()
        deadline = time.monotonic() + 0.5
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        server.sever_all()
        server.server_close()
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
            check_item(item)
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

    def restart(self, context_window: int | None = None, *, slots: int | None = None) -> None:
        """Behave like the server restarted with another window (`-c`) or slot count: open connections are cut,
        discovery answers the new numbers, requests are refused against the new window."""
        if context_window is not None:
            self.context_window = context_window
        if slots is not None:
            self.slots = max(1, slots)
        self.restarts += 1
        if self._server is not None:
            self._server.sever_all()

    @property
    def slot_window(self) -> int | None:
        """The window one request gets: the context split over the slots (llama.cpp)."""
        if self.context_window is None or self.kv.size is not None:  # unified: each slot may use all of it
            return self.context_window
        return self.context_window // max(1, self.slots)

    def error(self, kind: ErrorKind) -> ErrorReply:
        """This server's dialect's error of `kind` (``auth``, ``rate_limit``, ``overloaded``, ``server``)."""
        return self.dialect.error(kind)

    def context_error(self, prompt: int, completion: int = 0) -> ErrorReply:
        """This server's dialect's context-length error for `prompt` (+ `completion`) tokens."""
        return self.dialect.context(prompt, completion, self.slot_window)

    def _over_window(self, request: RecordedRequest) -> ErrorReply | None:
        """The dialect's context error when the request does not fit (the script is left untouched)."""
        prompt = prompt_tokens(request)
        if self.context_limit is not None and prompt > self.context_limit:
            return get_dialect("llamacpp").context(prompt, 0, self.context_limit)
        window = self.slot_window
        if window is None or self.dialect.truncates:
            return None
        completion = requested_completion(request) if self.dialect.counts_completion else 0
        if prompt + completion <= window:
            return None
        return self.dialect.context(prompt, completion, window)

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
            elif reply.id_style == "openai":
                ids.append("call_" + "".join(random.choices(ALNUM, k=24)))
            else:
                ids.append(self.dialect.tool_id(call.name, start + offset))
        with self._lock:
            self.tool_call_ids.extend(ids)
        return ids
