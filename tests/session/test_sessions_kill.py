"""`kill -9` the real `kimicode -p` process at many points, resume with `kimicode -c -p`, and check that
the next request carries a valid history holding everything committed before the kill."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers import TEST_KEY, command_env, history_problems, kimicode_command

from kimicode.agent.interrupted import NO_ANSWER
from kimicode.session.log import INTERRUPTED, iter_records, load
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

pytestmark = pytest.mark.slow


class Looper:
    """Replies forever with slowly streamed tool-calling steps; each step writes marker files as it runs."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.step = 0
        self.finish = False
        self.lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> Reply:
        with self.lock:
            self.step += 1
            i = self.step
        if self.finish:
            return Reply(content="all done")
        bash = {"command": f"echo {i} > started-{i}; sleep 0.6; echo {i} > finished-{i}; echo step {i}"}
        calls = [ToolCall("bash", bash)]
        if i % 2:  # a concurrent read batch first: some results are committed before the slow call starts
            calls = [ToolCall("read_file", {"path": "notes.txt"}), ToolCall("glob", {"pattern": f"*-{i}"}), *calls]
        return Reply(
            reasoning=f"step {i}: " + "thinking about the next command " * 4,
            content=f"Running step {i}.",
            tool_calls=calls,
            chunk_size=6,
            chunk_delay=0.01,
        )


def wait_for_file(path: Path, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"timed out waiting for {path.name}"
        time.sleep(0.01)


def test_kill_9_at_many_points_always_resumes_to_a_valid_history(
    server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "notes.txt").write_text("some notes\n")
    looper = Looper(workspace)
    server.add(*[looper] * 400)
    home = tmp_path / "home"
    env = command_env(home, server)

    def start(args: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*kimicode_command(), *args, "--yolo", "--output-format", "json"],
            env=env, cwd=workspace, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    # How each kill is timed, after the process has sent its first request (its resumed history):
    # mid-stream (the first reply streams for ~0.5 s), mid-tool (the bash call of the current step has
    # started), right after a tool finished (its result may not be committed yet), and a sweep of delays.
    plan: list[tuple[str, float]] = [
        ("stream", 0.1),
        ("tool", 0.0),
        ("tool", 0.3),
        ("after-tool", 0.0),
        ("stream", 0.3),
        ("after-tool", 0.02),
        *[("sweep", d) for d in (0.05, 0.45, 0.95, 1.4)],
    ]
    proc = start(["-p", "start the long job"])
    seen = 0
    session_id = None
    landed: list[str] = []
    for k, (how, delay) in enumerate(plan):
        server.wait_for_requests(seen + 1, timeout=15)  # the process sent its first request
        step = seen + 1  # the Looper numbers steps by request
        if how == "tool":
            wait_for_file(workspace / f"started-{step}")  # the step's bash call is running
        elif how == "after-tool":
            wait_for_file(workspace / f"finished-{step}")  # its command has just finished
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
        assert proc.returncode == -signal.SIGKILL

        (log,) = (home / "sessions").glob("*.jsonl")
        session_id = session_id or log.stem
        assert log.stem == session_id  # resuming never starts another log
        committed = [r["message"] for r in iter_records(log) if r.get("type") == "message"]
        last = committed[-1]
        landed.append("open tool calls" if load(log).repaired else f"after a {last['role']} message")
        if k == 4:  # a write torn by the kill: the resumed process must skip it and start a fresh line
            with log.open("a") as fh:
                fh.write('{"v": 1, "ts": 1.0, "type": "message", "message": {"role": "assistant", "content": "hal')

        seen = len(server.requests)
        proc = start(["-c", "-p", f"continue {k}"])
        # A request the killed process had already sent may be recorded after `seen` was read, so find
        # the resumed process's first request by its prompt rather than by position.
        prompt = {"role": "user", "content": f"continue {k}"}
        deadline = time.monotonic() + 15
        while True:
            mine = [
                i
                for i in range(seen, len(server.requests))
                if (server.requests[i].body or {}).get("messages", [None])[-1] == prompt
            ]
            if mine:
                seen = mine[0]
                break
            assert time.monotonic() < deadline, "the resumed process never sent its request"
            time.sleep(0.02)
        sent = server.requests[seen].body
        messages = sent["messages"]
        assert history_problems(messages, system_first=True) == [], (how, delay)
        assert messages[: len(committed)] == committed, "something committed before the kill was lost"
        assert messages[-1] == {"role": "user", "content": f"continue {k}"}
        synthetic = messages[len(committed) : -1]
        unanswered = {"role": "assistant", "content": NO_ANSWER}  # killed before the model answered a prompt
        assert all((m["role"] == "tool" and m["content"] == INTERRUPTED) or m == unanswered for m in synthetic)
        assert sent["prompt_cache_key"] == session_id  # the same cache key across resumes

    looper.finish = True
    out, err = proc.communicate(timeout=30)
    # the last process was not killed: it finishes its step, then the scripted answer ends the turn
    assert proc.returncode == 0, err
    assert json.loads(out)["result"] == "all done"
    final = load(home / "sessions" / f"{session_id}.jsonl")
    assert history_problems(final.messages, system_first=True) == [] and final.repaired == 0
    lines = (home / "sessions" / f"{session_id}.jsonl").read_text().splitlines()
    unreadable = [line for line in lines if not _parses(line)]
    assert len(unreadable) == 1 and unreadable[0].endswith('"content": "hal')  # only the torn one
    assert "open tool calls" in landed and "after a user message" in landed  # mid-tool and mid-stream kills
    assert TEST_KEY.encode() not in b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file())


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True
