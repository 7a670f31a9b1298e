"""The installed `kimicode serve` end to end: the first line of stdout, the token, a session with a tool call
against the fake model server, resume after the process restarts, and the loopback default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kimicode.serve.client import ServeClient
from kimicode.testing import FakeServer

pytestmark = pytest.mark.slow


@contextmanager
def serving(server: FakeServer, *args: str) -> Iterator[tuple[ServeClient, dict[str, Any]]]:
    env = {**os.environ, "KIMI_API_KEY": "sk-test", "KIMI_BASE_URL": server.base_url}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kimicode", "serve", "--port", "0", "--sandbox", "off", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        first = json.loads(line)
        with ServeClient(first["url"], first["token"]) as client:
            yield client, first
    finally:
        proc.terminate()
        proc.wait(20)
    assert proc.returncode in (0, -15), proc.stderr.read() if proc.stderr else ""


def test_serve_announces_itself_and_runs_sessions_across_restarts(
    model: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    with serving(model) as (client, first):
        assert set(first) == {"url", "token"} and first["url"].startswith("http://127.0.0.1:")
        assert len(first["token"]) >= 32
        state = json.loads((tmp_path / "home" / "serve.json").read_text())
        assert state["token"] == first["token"]
        assert (tmp_path / "home" / "serve.json").stat().st_mode & 0o777 == 0o600
        sid = client.create(str(workspace), permission_mode="default")
        events = client.run(sid, "run echo served > proof.txt", decide=lambda request: "allow")
        assert events[-1]["status"] == "success" and (workspace / "proof.txt").read_text() == "served\n"
    assert not (tmp_path / "home" / "serve.json").exists()
    with serving(model) as (client, second):
        assert second["token"] != first["token"]
        assert client.resume(sid) == sid
        assert client.run(sid, "again")[-1]["result"] == "echo: again"


def test_serve_refuses_a_remote_host_without_the_flag(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "kimicode", "serve", "--host", "0.0.0.0"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2 and "--allow-remote" in run.stderr and run.stdout == ""


def test_web_attaches_to_the_running_server_or_starts_one(model: FakeServer, tmp_path: Path) -> None:
    env = {**os.environ, "KIMI_API_KEY": "sk-test", "KIMI_BASE_URL": model.base_url}
    with serving(model) as (_, first):
        attached = subprocess.run(
            [sys.executable, "-m", "kimicode", "web", "--no-open"], capture_output=True, text=True, env=env, timeout=60
        )
        assert attached.returncode == 0, attached.stderr
        assert f"{first['url']}/#token={first['token']}" in attached.stderr and attached.stdout == ""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kimicode", "web", "--no-open"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        started = json.loads(proc.stdout.readline())  # no server was running: it serves itself
        assert started["token"] != first["token"]
        assert f"{started['url']}/#token={started['token']}" in proc.stderr.readline()
        with ServeClient(started["url"], started["token"]) as own:
            assert own.sessions()["sessions"] == []
    finally:
        proc.terminate()
        proc.wait(20)


def test_the_asgi_stack_loads_only_for_serve() -> None:
    """`import kimicode`, the library's Agent and the command line's application never import Starlette or
    uvicorn (lint-imports checks the imports; this, what a real process loads)."""
    probe = (
        "import sys, kimicode; kimicode.Agent; import kimicode.cli.app; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'starlette', 'uvicorn', 'kimicode.serve'}), "
        "[m for m in sys.modules if m.startswith('kimicode.serve')])"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] []"
