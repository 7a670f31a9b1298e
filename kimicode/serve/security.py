"""The server's gate: every request passes it before any route sees it (a plain ASGI middleware).

- **Host**: the `Host` header must name this server as bound (`127.0.0.1:PORT`, `localhost:PORT`,
  `[::1]:PORT`, or the `--host` given). A page on another site that rebinds its own name to 127.0.0.1
  sends its own name as Host, and is refused (421): DNS rebinding cannot reach the API.
- **Origin**: a request carrying an `Origin` must come from this server's own page (same scheme, host
  and port). No CORS header is ever sent, so no other site's script can read an answer; a foreign
  Origin is refused outright (403), so it cannot cause anything either.
- **Token**: every request but the page itself (`GET /`, `/static/...`, which hold no data) carries
  `Authorization: Bearer TOKEN`, compared in constant time (`hmac.compare_digest`). The page gets the
  token from the URL's fragment, which browsers never send to a server or put in a Referer.
- **Size**: a body over `max_body` bytes is refused (413) whether it announces its length or streams it
  chunked, before any route sees it; headers over 32 KiB are refused (431).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 1024 * 1024
"""Bytes of a request body (a prompt of a few hundred pages)."""
MAX_HEADERS = 32 * 1024
"""Bytes of a request's headers (uvicorn bounds a header block still arriving; this, one that came at once)."""
PUBLIC_PATHS = ("/", "/index.html", "/favicon.ico")
PUBLIC_PREFIX = "/static/"


def new_token() -> str:
    """A fresh bearer token (256 bits)."""
    return secrets.token_urlsafe(32)


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The Host header values that name this server."""
    names = {host}
    if host in ("127.0.0.1", "localhost", "::1"):
        names |= {"127.0.0.1", "localhost", "[::1]"}
    if ":" in host and not host.startswith("["):
        names.add(f"[{host}]")
    return frozenset(f"{n}:{port}" for n in names if not n.count(":") or n.startswith("["))


class Gate:
    """The middleware: Host, Origin, token, body size; then the app."""

    def __init__(
        self, app: ASGIApp, token: str, hosts: frozenset[str] | Callable[[], frozenset[str]], max_body: int = MAX_BODY
    ) -> None:
        self.app = app
        self.token = token.encode()
        self.hosts = hosts
        self.max_body = max_body

    def _hosts(self) -> frozenset[str]:
        return self.hosts() if callable(self.hosts) else self.hosts

    def _header_problem(self, headers: dict[str, str]) -> tuple[int, str] | None:
        """Why the request's Host, Origin or Content-Length is refused (status, message), or None."""
        hosts = self._hosts()
        host = headers.get("host", "")
        if host.lower() not in hosts:
            return 421, "this server answers only to its own address (Host header refused)"
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in {f"http://{h}" for h in hosts}:
            return 403, "cross-origin requests are refused"
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return 413, f"request body over {self.max_body} bytes"
        return None

    def problem(self, scope: Scope) -> tuple[int, str] | None:
        """Why this request is refused (status, message), or None."""
        raw_headers = scope.get("headers", [])
        if sum(len(k) + len(v) + 4 for k, v in raw_headers) > MAX_HEADERS:
            return 431, f"request headers over {MAX_HEADERS} bytes"
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if (refused := self._header_problem(headers)) is not None:
            return refused
        path = scope.get("path", "")
        if scope.get("method") == "GET" and (path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIX)):
            return None
        given = headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode("latin-1"), self.token):
            return 401, "missing or wrong token (Authorization: Bearer TOKEN)"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return
        problem = self.problem(scope)
        if problem is not None:
            await refuse(send, *problem)
            return
        body = await self.read_body(receive)
        if body is None:
            await refuse(send, 413, f"request body over {self.max_body} bytes")
            return
        await self.app(scope, replay(body, receive), send)

    async def read_body(self, receive: Receive) -> bytes | None:
        """The whole request body (bodies are small JSON), or None once it runs past `max_body`: the
        request is refused before any route sees it, however the body was framed."""
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the app the body already read, then what the server says next (a
    disconnect, which the event streams wait for)."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


async def refuse(send: Send, status: int, message: str) -> None:
    """A JSON error response, with no CORS header and nothing cached."""
    from kimicode.serve.wire import dumps

    body = dumps({"error": message, "status": status}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="kimicode"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
