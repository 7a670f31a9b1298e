"""The attack suite of `kimicode serve`: what a request without the token, a rebinding page, another
site's script, an oversized body, path tricks, a crowd of slow clients and a client that never reads
its events can do (nothing but be refused, and the sessions go on)."""

from __future__ import annotations

import http.client
import os
import socket
import time
from pathlib import Path

import pytest

from kimicode.serve.client import ServeClient, ServeClientError
from kimicode.serve.manager import ServeConfig
from kimicode.serve.server import ThreadedServer
from kimicode.testing import FakeServer, Reply


def raw(
    live: ThreadedServer, method: str, path: str, headers: dict[str, str] | None = None, body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request with exactly these headers (Host included: http.client adds none we do not give)."""
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=20)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for name, value in (headers or {}).items():
        conn.putheader(name, value)
    if body is not None and "Content-Length" not in (headers or {}) and "Transfer-Encoding" not in (headers or {}):
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def good(live: ThreadedServer, **extra: str) -> dict[str, str]:
    return {"Host": f"127.0.0.1:{live.port}", "Authorization": f"Bearer {live.token}", **extra}


def test_requests_without_the_right_token_are_refused(live: ThreadedServer) -> None:
    host = {"Host": f"127.0.0.1:{live.port}"}
    assert raw(live, "GET", "/sessions", host)[0] == 401
    status, headers, _ = raw(live, "GET", "/sessions", {**host, "Authorization": "Bearer " + "x" * 43})
    assert status == 401 and headers["www-authenticate"].startswith("Bearer")
    assert raw(live, "GET", "/sessions", {**host, "Authorization": f"Basic {live.token}"})[0] == 401
    assert raw(live, "GET", "/sessions", {**host, "Authorization": f"Bearer {live.token[:-1]}"})[0] == 401
    assert raw(live, "GET", "/openapi.json", host)[0] == 401
    assert raw(live, "GET", "/sessions", good(live))[0] == 200


def test_a_rebinding_host_is_refused(live: ThreadedServer) -> None:
    for host in (f"evil.example:{live.port}", "evil.example", f"127.0.0.1:{live.port + 1}", "127.0.0.1", ""):
        assert raw(live, "GET", "/sessions", good(live, Host=host))[0] == 421, host
    assert raw(live, "GET", "/", {"Host": "attacker.test"})[0] == 421  # the page too
    assert raw(live, "GET", "/sessions", good(live, Host=f"localhost:{live.port}"))[0] == 200


def test_a_foreign_origin_is_refused_and_no_cors_is_offered(live: ThreadedServer) -> None:
    for origin in (
        "http://evil.example",
        f"http://127.0.0.1:{live.port}.evil.example",
        "null",
        f"https://127.0.0.1:{live.port}",
        f"http://127.0.0.1:{live.port + 1}",
    ):
        status, headers, _ = raw(live, "GET", "/sessions", good(live, Origin=origin))
        assert status == 403, origin
        assert not any(k.startswith("access-control-") for k in headers)
    status, headers, _ = raw(live, "OPTIONS", "/sessions", good(live, Origin="http://evil.example"))
    assert status == 403 and "access-control-allow-origin" not in headers
    status, headers, _ = raw(live, "GET", "/sessions", good(live, Origin=f"http://127.0.0.1:{live.port}"))
    assert status == 200 and "access-control-allow-origin" not in headers


def test_oversized_bodies_are_refused(live: ThreadedServer, workspace: Path) -> None:
    big = b'{"workspace": "' + b"a" * (2 * 1024 * 1024) + b'"}'
    assert raw(live, "POST", "/sessions", good(live, **{"Content-Type": "application/json"}), big)[0] == 413
    assert raw(live, "POST", "/sessions", good(live, **{"Content-Length": "99999999999"}), b"")[0] == 413
    chunks = b"".join(b"%x\r\n" % 65536 + b"a" * 65536 + b"\r\n" for _ in range(20)) + b"0\r\n\r\n"
    status, _, _ = raw(live, "POST", "/sessions", good(live, **{"Transfer-Encoding": "chunked"}), chunks)
    assert status == 413
    assert raw(live, "GET", "/sessions", good(live, **{"X-Big": "a" * 100_000}))[0] in (400, 431)
    assert not list(live.app.app.state.sessions.live)


@pytest.mark.parametrize(
    "path",
    [
        "/sessions/..%2F..%2Fetc",
        "/sessions/../../etc/passwd",
        "/sessions/%00",
        "/sessions/a%2Fb/messages",
        "/sessions/" + "a" * 300,
        "/static/../app.py",
        "/static/..%2F__init__.py",
        "/static/%2e%2e%2fserver.py",
    ],
)
def test_path_tricks_in_ids_find_nothing(live: ThreadedServer, path: str) -> None:
    status, _, body = raw(live, "GET", path, good(live))
    assert status == 404, body
    assert b"import" not in body


def test_workspaces_must_be_real_directories_the_user_named(client: ServeClient, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "sessions").mkdir(parents=True, exist_ok=True)
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "to-home").symlink_to(home)
    for given in (
        "relative/dir",
        "",
        str(tmp_path / "missing"),
        str(tmp_path / "file.txt"),
        str(home),
        str(tmp_path / "to-home"),
        str(tmp_path / "to-home" / "sessions"),
        "/proc/self/cwd/\x00",
    ):
        with pytest.raises(ServeClientError) as err:
            client.create(given)
        assert err.value.status in (400, 422), given
    with pytest.raises(ServeClientError) as typed:
        client.request("POST", "/sessions", {"workspace": ["/"]})
    assert typed.value.status == 422
    with pytest.raises(ServeClientError) as unknown:
        client.request("POST", "/sessions", {"workspace": str(tmp_path), "allow": ["bash(*)"]})
    assert unknown.value.status == 422 and "allow" in unknown.value.message
    with pytest.raises(ServeClientError) as traversal:
        client.resume("../../etc/passwd")
    assert traversal.value.status == 404


def test_roots_confine_workspaces(config: ServeConfig, tmp_path: Path) -> None:
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    (inside / "p").mkdir(parents=True)
    outside.mkdir()
    (inside / "escape").symlink_to(outside)
    config.roots = (inside,)
    with ThreadedServer(config) as live, ServeClient(live.url, live.token) as client:
        assert client.create(str(inside / "p"))
        for given in (str(outside), str(inside / "escape"), str(inside / "p" / ".." / ".." / "outside")):
            with pytest.raises(ServeClientError) as err:
                client.create(given)
            assert err.value.status == 400 and "--root" in err.value.message


def test_the_server_never_widens_a_sessions_permissions(config: ServeConfig, workspace: Path) -> None:
    config.max_mode = "accept-edits"
    with ThreadedServer(config) as live, ServeClient(live.url, live.token) as client:
        with pytest.raises(ServeClientError) as err:
            client.create(str(workspace), permission_mode="yolo")
        assert err.value.status == 403
        sid = client.create(str(workspace), permission_mode="default")
        with pytest.raises(ServeClientError) as later:
            client.settings(sid, permission_mode="yolo")
        assert later.value.status == 403 and client.state(sid)["permission_mode"] == "default"
        # an answer allows that call only: the rule is the engine's, the client cannot name one
        with pytest.raises(ServeClientError):
            client.request("POST", f"/sessions/{sid}/permissions/x", {"decision": "allow_always", "rule": "bash(*)"})


def test_the_page_is_public_static_and_locked_down(live: ThreadedServer) -> None:
    status, headers, body = raw(live, "GET", "/", {"Host": f"127.0.0.1:{live.port}"})
    assert status == 200 and b"<html" in body.lower()
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert raw(live, "GET", "/static/app.js", {"Host": f"127.0.0.1:{live.port}"})[0] == 200
    assert b"http" not in body.replace(b"http-equiv", b"")  # nothing loaded from elsewhere


@pytest.mark.slow
def test_five_hundred_slow_clients_do_not_stop_the_server(live: ThreadedServer) -> None:
    slow: list[socket.socket] = []
    try:
        for _ in range(500):
            s = socket.create_connection(("127.0.0.1", live.port), timeout=5)
            s.sendall(b"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % live.port)  # and never the rest
            slow.append(s)
        start = time.monotonic()
        status, _, _ = raw(live, "GET", "/sessions", good(live))
        assert status == 200 and time.monotonic() - start < 5
        with ServeClient(live.url, live.token) as client:
            assert client.sessions()["sessions"] == []
    finally:
        for s in slow:
            s.close()


@pytest.mark.slow
def test_a_client_that_never_reads_its_events_costs_bounded_memory(
    server: FakeServer, tmp_path: Path, workspace: Path
) -> None:
    """The stuck reader is cut off once its queue is full (its memory freed at once); the session, and a
    client that does read, go on to the end of every turn."""
    server.add(*[Reply(content="x" * 1000 * 400, chunk_size=1000) for _ in range(4)])
    config = ServeConfig(
        settings={"base_url": server.base_url, "api_key": "sk-test", "retry_base_delay": 0.01},
        home=tmp_path / "home",
        per_subscriber=64,
    )
    with ThreadedServer(config) as live, ServeClient(live.url, live.token) as client:
        sid = client.create(str(workspace))
        stuck = socket.socket()
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.connect(("127.0.0.1", live.port))
        stuck.sendall(
            f"GET /sessions/{sid}/events HTTP/1.1\r\nHost: 127.0.0.1:{live.port}\r\n"
            f"Authorization: Bearer {live.token}\r\n\r\n".encode()
        )
        hub = live.app.app.state.sessions.live[sid].hub
        deadline = time.monotonic() + 10
        while not hub.subscribers and time.monotonic() < deadline:
            time.sleep(0.01)
        (reader,) = hub.subscribers
        try:
            for n in range(4):
                events = client.run(sid, f"turn {n}")
                assert events[-1]["status"] == "success", events[-1]["error"]
                assert len(events) > 400
                assert reader.queue.qsize() <= 64
            assert reader.overflowed and reader.queue.qsize() <= 1
            assert hub.ring_bytes <= 8 * 1024 * 1024
        finally:
            stuck.close()


def test_many_requests_reuse_little(live: ThreadedServer) -> None:
    """Refusals cost no session and no open file: 300 refused requests leave the process's descriptors."""
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(300):
        raw(live, "GET", "/sessions", {"Host": f"127.0.0.1:{live.port}"})
    time.sleep(0.2)
    assert len(os.listdir("/proc/self/fd")) < before + 20


def test_a_resumed_session_does_not_keep_a_wider_recorded_mode(client: ServeClient, workspace: Path) -> None:
    sid = client.create(str(workspace), permission_mode="yolo")
    client.run(sid, "hello")
    client.close_session(sid)
    assert client.resume(sid) == sid
    assert client.state(sid)["permission_mode"] == "default"  # as `kimicode -r`: the mode is asked, not recorded
    events = client.run(sid, "run touch widened")
    assert "PermissionRequested" in [e["type"] for e in events] and not (workspace / "widened").exists()
