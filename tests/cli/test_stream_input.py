"""`kimicode --input-format stream-json` as a program drives it: messages written over time on a pipe, an
interrupt while a turn streams, a malformed line, end of input."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import command_env, kimicode_command, stream_json_user

from kimicode.testing import FakeServer, Reply

pytestmark = pytest.mark.slow


def test_three_messages_an_interruption_and_a_malformed_line(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    server.add(
        Reply(content="first answer"),
        Reply(content="a very long answer " * 200, chunk_size=5, chunk_delay=0.02),
        Reply(content="third answer"),
    )
    proc = subprocess.Popen(
        [*kimicode_command(), "--input-format", "stream-json", "--output-format", "stream-json", "--include-partial"],
        env=command_env(tmp_path / "home", server),
        cwd=workspace,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    seen: list[dict[str, Any]] = []

    def send(line: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(line)
        proc.stdin.flush()

    def until(kind: str) -> dict[str, Any]:
        assert proc.stdout is not None
        for raw in proc.stdout:
            event = json.loads(raw)  # every stdout line is JSON
            seen.append(event)
            if event["type"] == kind:
                return event
        raise AssertionError(f"no {kind} line; stderr: {proc.stderr.read() if proc.stderr else ''}")

    try:
        send(stream_json_user("one"))
        assert until("result")["result"] == "first answer"
        send("this is not json\n")
        assert "line 2: not JSON" in until("error")["error"]
        send(stream_json_user("two"))
        until("delta")  # the long answer is streaming
        send(json.dumps({"type": "control_request", "request_id": "r1", "request": {"subtype": "interrupt"}}) + "\n")
        interrupted = until("result")
        assert interrupted["status"] == "interrupted"
        send(stream_json_user("three"))
        third = until("result")
        assert third["status"] == "success" and third["result"] == "third answer"
        proc.stdin.close()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    sessions = {e["session_id"] for e in seen if e["type"] == "result"}
    assert len(sessions) == 1
    # the interrupted turn left a valid history: the third request carries it and the new message
    last = server.requests[2].body["messages"]
    assert [m["content"] for m in last if m["role"] == "user"][-3:] == ["one", "two", "three"]
