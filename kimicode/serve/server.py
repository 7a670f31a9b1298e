"""Running the server: bind, announce `{"url", "token"}` as the first line of stdout, serve with uvicorn.

The socket is bound before anything is announced (`--port 0` picks a free port, and the line names it),
so a client that reads the line can connect at once. Loopback only, unless `--host` comes with
`--allow-remote`. The token is new at every start; it is also written, with the URL and the process id,
to `KIMICODE_HOME/serve.json` (0600) for `kimicode web` to attach, and that file is removed at exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn

from kimicode.config.serve_state import state_path
from kimicode.serve.app import build_app
from kimicode.serve.manager import ServeConfig
from kimicode.serve.security import MAX_BODY, allowed_hosts, new_token

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class ServeError(Exception):
    """The server cannot start as asked (exit 2, with this message)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def write_state(home: Path, url: str, token: str) -> Path:
    from kimicode.safeio import private_dirs, private_write

    private_dirs(home)
    path = state_path(home)
    private_write(path, json.dumps({"url": url, "token": token, "pid": os.getpid()}))
    return path


def run(
    config: ServeConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    allow_remote: bool = False,
    allowed_host: tuple[str, ...] = (),
    max_body: int = MAX_BODY,
    out: Any = None,
) -> int:
    """Serve until interrupted; returns the exit code."""
    if not is_loopback(host) and not allow_remote:
        raise ServeError(f"--host {host} is reachable from other machines: add --allow-remote to mean it")
    sock = bind(host, port)
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}"
    token = new_token()
    hosts = allowed_hosts(host, port) | {f"{h}:{port}" for h in allowed_host}
    app = build_app(config, token, hosts, max_body)
    home = config.home if config.home is not None else default_home()
    state = write_state(home, url, token)
    stream: Any = out or sys.stdout
    stream.write(json.dumps({"url": url, "token": token}) + "\n")
    stream.flush()
    server = ClosingServer(uvicorn_config(app))
    server.cleanup = lambda: forget_state(state, token)  # uvicorn re-raises SIGTERM once it has shut down
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        sock.close()
        forget_state(state, token)
    return 0


def forget_state(state: Path, token: str) -> None:
    """Remove the state file, if it is still this server's."""
    with contextlib.suppress(OSError, ValueError):
        if json.loads(state.read_text()).get("token") == token:
            state.unlink()


def uvicorn_config(app: Any) -> uvicorn.Config:
    """uvicorn's settings: no access log, no Server header, idle connections closed after 5 s, header blocks
    bounded (64 KiB: h11, whose bound this is, rather than httptools), at most 4096 connections and tasks
    (past that: 503), 3 s for a graceful shutdown."""
    return uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        server_header=False,
        date_header=False,
        timeout_keep_alive=5,
        timeout_graceful_shutdown=3,
        limit_concurrency=4096,
        http="h11",
        h11_max_incomplete_event_size=64 * 1024,
        ws="none",
    )


def default_home() -> Path:
    from kimicode.config.endpoint import kimicode_home

    return kimicode_home()


class ClosingServer(uvicorn.Server):
    """uvicorn's server, ending the event streams first at shutdown (they would otherwise hold it open
    until the graceful-shutdown timeout)."""

    cleanup: Callable[[], None] | None = None

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app = self.config.app
        sessions = getattr(getattr(getattr(app, "app", None), "state", None), "sessions", None)
        if sessions is not None:
            for session in list(sessions.live.values()):
                session.hub.close()
        try:
            await super().shutdown(sockets)
        finally:
            if self.cleanup is not None:
                self.cleanup()


class ThreadedServer:
    """The server on a thread of this process, its own event loop (tests, benchmarks, embedding it in a
    program): `with ThreadedServer(config) as s: ServeClient(s.url, s.token)`."""

    def __init__(self, config: ServeConfig, *, max_body: int = MAX_BODY, port: int = 0) -> None:
        import threading

        self.sock = bind("127.0.0.1", port)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = new_token()
        self.app = build_app(config, self.token, allowed_hosts("127.0.0.1", self.port), max_body)
        self.server = ClosingServer(uvicorn_config(self.app))
        self.thread = threading.Thread(target=self._run, name="kimicode-serve", daemon=True)

    def _run(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.sock]))

    def __enter__(self) -> ThreadedServer:
        import time

        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self.server.started:
            raise ServeError("the server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()
