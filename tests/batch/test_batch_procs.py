"""The local engine on several worker processes: results stream back, the 429 gate is shared between the
processes, and a worker process that dies has its tasks run again."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kimicode.batch import SharedRateLimiter, TaskResult, run
from kimicode.prompts import user_words
from kimicode.testing import ErrorReply, FakeServer, RecordedRequest, Reply, ToolCall

pytestmark = pytest.mark.prepush  # worker processes: the pre-push tier (README)


def prompt_of(req: RecordedRequest) -> str:
    return user_words(next(str(m["content"]) for m in req.body["messages"] if m["role"] == "user"))


def collect(
    tasks: list[Any], server: FakeServer, tmp_path: Path, events: list[tuple[str, str, int]], **kw: Any
) -> dict[str, TaskResult]:
    async def go() -> dict[str, TaskResult]:
        out: dict[str, TaskResult] = {}
        async for r in run(
            tasks,
            processes=2,
            root=tmp_path / "b",
            base_url=server.base_url,
            api_key="sk-test",
            model="kimi-k3",
            permission_mode="yolo",
            retry_base_delay=0.01,
            on_event=lambda kind, t, n: events.append((kind, t.id, n)),
            agent_options={"sandbox": "off"},
            **kw,
        ):
            assert r.id not in out
            out[r.id] = r
        return out

    return asyncio.run(go())


def test_tasks_run_in_worker_processes_and_a_dead_worker_is_replaced(tmp_path: Path) -> None:
    killed: list[str] = []

    def script(req: RecordedRequest) -> Reply:
        p = prompt_of(req)
        if req.body["messages"][-1]["role"] != "user":
            return Reply(content=f"done {p}")
        if p == "die" and not killed:
            killed.append(p)  # the worker process running this task kills itself
            return Reply(tool_calls=[ToolCall("bash", {"command": "kill -9 $PPID"})])
        return Reply(tool_calls=[ToolCall("write_file", {"path": f"{p}.txt", "content": p})])

    events: list[tuple[str, str, int]] = []
    names = ["a", "b", "c", "d", "die"]
    with FakeServer([script] * 30) as server:
        results = collect([{"id": n, "prompt": n} for n in names], server, tmp_path, events, concurrency=2)
    assert set(results) == set(names)
    for n in names:
        r = results[n]
        assert r.status == "success" and r.changed_files == [f"{n}.txt"], r
        assert Path(str(r.workspace), f"{n}.txt").read_text() == n
    assert killed and results["die"].attempts == 2 and ("retrying", "die", 2) in events
    assert {(kind, tid) for kind, tid, _ in events if kind == "started"} == {("started", n) for n in names}


def test_a_429_in_one_worker_process_slows_the_other(tmp_path: Path) -> None:
    stamps: dict[str, list[float]] = {"A": [], "B": []}
    limited: list[float] = []
    a_limited = threading.Event()

    def script(req: RecordedRequest) -> Reply | ErrorReply:
        p = prompt_of(req)
        stamps[p].append(time.monotonic())
        if p == "A" and not limited:
            limited.append(time.monotonic())
            a_limited.set()
            return ErrorReply(429, "rate limit reached", "rate_limit_error", headers={"Retry-After": "1"})
        if p == "B" and req.body["messages"][-1]["role"] == "user":
            # B's first answer waits for A's 429 (worker processes start at their own pace on a loaded
            # machine), so B's second request is the one the shared gate must hold back
            assert a_limited.wait(30)
            return Reply(tool_calls=[ToolCall("bash", {"command": "true"})], first_delay=0.3)
        return Reply(content=f"ok {p}")

    limiter = SharedRateLimiter()
    events: list[tuple[str, str, int]] = []
    with FakeServer([script] * 10) as server:
        # concurrency 2 on 2 processes: one task per process
        results = collect(
            [{"id": "a", "prompt": "A"}, {"id": "b", "prompt": "B"}],
            server,
            tmp_path,
            events,
            concurrency=2,
            limiter=limiter,
        )
    assert results["a"].status == results["b"].status == "success"
    assert len(stamps["B"]) == 2 and stamps["B"][1] - limited[0] >= 0.95
    assert limiter.throttles == 1


def test_processes_must_be_positive(tmp_path: Path) -> None:
    async def go() -> None:
        async for _ in run([{"id": "a", "prompt": "a"}], processes=0, root=tmp_path):
            pass

    with pytest.raises(ValueError, match="processes must be at least 1"):
        asyncio.run(go())


def test_cli_processes_flag_runs_and_resumes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from kimicode.cli.app import app
    from kimicode.cli.batch_cmd import default_processes

    assert default_processes(4) == 1 and default_processes(1000) >= 1

    def answer(req: RecordedRequest) -> Reply:
        return Reply(content=f"answer {prompt_of(req)}")

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "prompt": f"p{i}"}) + "\n" for i in range(4)))
    out = tmp_path / "results.jsonl"
    args = ["batch", str(tasks), "-o", str(out), "--processes", "2", "-j", "4"]
    with FakeServer([answer] * 4) as server:
        monkeypatch.setenv("KIMI_API_KEY", "sk-test")
        monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
        codes = []
        for _ in range(2):  # the second run finds every task finished and asks nothing
            try:
                codes.append(app(args=args, prog_name="kimicode", standalone_mode=False))
            except SystemExit as exc:
                codes.append(exc.code)
        assert len(server.requests) == 4
    err = capsys.readouterr().err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["id"], r["result"]) for r in lines) == [(f"t{i}", f"answer p{i}") for i in range(4)]
    assert [int(c or 0) for c in codes] == [0, 0] and "4 task(s) already finished" in err


def children_of(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_ctrl_c_with_worker_processes_stops_them_and_says_how_to_resume(tmp_path: Path) -> None:
    import json
    import os
    import signal
    import subprocess

    from helpers import kimicode_command

    def slow(req: RecordedRequest) -> Reply:
        p = prompt_of(req)
        return Reply(content="quick" if p == "fast" else "slow", first_delay=0 if p == "fast" else 30)

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": i, "prompt": p}) + "\n" for i, p in (("f", "fast"), ("s", "slow"))))
    with FakeServer([slow] * 4) as server:
        env = {**os.environ, "KIMI_API_KEY": "sk-test", "KIMI_BASE_URL": server.base_url}
        proc = subprocess.Popen(
            [*kimicode_command(), "batch", str(tasks), "-o", "r.jsonl", "--processes", "2", "-j", "2"],
            cwd=tmp_path,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        results = tmp_path / "r.jsonl"
        deadline = time.monotonic() + 60
        while not (results.exists() and results.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = children_of(proc.pid)
        assert len(workers) >= 2  # the two workers (and multiprocessing's resource tracker)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group, workers included
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "1 finished, 1 left; resume with: kimicode batch" in err and "Traceback" not in err
    assert [json.loads(x)["id"] for x in results.read_text().splitlines()] == ["f"]
    deadline = time.monotonic() + 10
    while any(alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in workers)
