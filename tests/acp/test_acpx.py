"""acpx (npm, pinned in tests/fixtures/acpx, installed by .ci/run) drives `kimicode acp` as it drives every agent:
each command starts the agent again and reconnects to the session (session/resume). A new session, a prompt
with a tool, `set-mode plan` then a prompt in a new process (the write is refused), the session list, a
cancelled prompt and the question after it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from helpers import kimicode_command

from kimicode.testing import FakeServer, Reply, ToolCall

pytestmark = pytest.mark.slow

ACPX = Path(__file__).parent.parent / "fixtures" / "acpx" / "node_modules" / "acpx" / "dist" / "cli.js"
TTL = "1"
"""Seconds acpx keeps its queue owner (and so the agent) after a command: each command then reconnects."""


def test_acpx_reconnects_keep_the_session_and_its_mode(server: FakeServer, workspace: Path, tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: acpx cannot run here")
    assert ACPX.exists(), f"acpx is not installed: run `npm ci --prefix {ACPX.parents[3]}` (.ci/run does)"
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": "echo made > made.txt"})]),
        Reply(content="made it"),
        Reply(tool_calls=[ToolCall("write_file", {"path": "x.txt", "content": "x"})]),
        Reply(content="plan mode kept me from writing"),
        Reply(content="a long answer " * 400, chunk_size=4, chunk_delay=0.03),
        Reply(content="after the cancel"),
    )
    env = dict(
        os.environ,
        HOME=str(tmp_path),
        KIMICODE_HOME=str(tmp_path / "home"),
        KIMI_API_KEY="sk-acpx-test",
        KIMI_BASE_URL=server.base_url,
        KIMICODE_RETRY_BASE_DELAY="0.01",
    )
    base = [node, str(ACPX), "--agent", f"{kimicode_command()[0]} acp", "--ttl", TTL, "--format", "text"]

    def acpx(*args: str) -> str:
        time.sleep(float(TTL) + 1)  # the previous command's agent is gone: this one reconnects
        done = subprocess.run([*base, *args], cwd=workspace, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    sid = acpx("sessions", "new").strip()
    assert "made it" in acpx("--approve-all", "make the file")
    assert (workspace / "made.txt").read_text() == "made\n"
    assert "mode set: plan" in acpx("set-mode", "plan")
    out = acpx("--approve-all", "write x.txt")
    assert not (workspace / "x.txt").exists() and "plan mode" in out
    listed = acpx("sessions", "list")
    assert sid in listed and "make the file" in listed
    time.sleep(float(TTL) + 1)
    running = subprocess.Popen(
        [*base, "write an essay"], cwd=workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        while len(server.requests) < 5:  # the essay is streaming
            time.sleep(0.05)
        cancel = subprocess.run([*base, "cancel"], cwd=workspace, env=env, capture_output=True, text=True, timeout=60)
        assert cancel.returncode == 0, cancel.stdout + cancel.stderr
        assert running.wait(60) == 0
    finally:
        if running.poll() is None:
            running.kill()
    assert "after the cancel" in acpx("and now?")
    last = server.requests[-1].body["messages"]
    assert [m["content"] for m in last if m["role"] == "user"][-1] == "and now?"
    assert all(r.body["messages"][1]["content"] == "make the file" for r in server.requests[1:])  # one session
