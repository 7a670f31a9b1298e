"""`kimicode batch`: resume, bad lines, stream-json, the summary, `batch report`, Ctrl-C and how to resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import kimicode_command, run_app

from kimicode.prompts import user_words
from kimicode.testing import ErrorReply, FakeServer, RecordedRequest, Reply


def by_prompt(req: RecordedRequest) -> Reply | ErrorReply:
    prompt = user_words(next(m["content"] for m in req.body["messages"] if m["role"] == "user"))
    if prompt == "fail":
        return ErrorReply(400, "bad request: nope", "invalid_request_error")
    return Reply(content=f"answer {prompt}")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeServer]:
    server = FakeServer([by_prompt] * 50).start()
    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    monkeypatch.chdir(tmp_path)
    yield server
    server.stop()


def write_tasks(path: Path, lines: list[Any]) -> None:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")


def test_batch_resumes_skipping_finished_tasks(
    env: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    write_tasks(
        tasks, [{"id": "a", "prompt": "one"}, "{oops", {"id": "b", "prompt": "fail"}, {"id": "c", "prompt": "three"}]
    )
    code, out, err = run_app(["batch", str(tasks), "-o", "r.jsonl", "-j", "2"], capsys)
    assert code == 1  # a task failed and a line was bad
    assert "skipped line 2: not valid JSON" in err
    lines = [json.loads(x) for x in Path("r.jsonl").read_text().splitlines()]
    assert sorted((x["id"], x["status"]) for x in lines) == [("a", "success"), ("b", "error"), ("c", "success")]
    assert "3 tasks" in err and "success" in err and "slowest" in err
    first = len(env.requests)

    code, out, err = run_app(["batch", str(tasks), "-o", "r.jsonl"], capsys)
    assert "3 task(s) already finished" in err and len(env.requests) == first  # nothing re-run
    code, out, err = run_app(
        ["batch", str(tasks), "-o", "r.jsonl", "--retry-failed", "--output-format", "stream-json"], capsys
    )
    events = [json.loads(x) for x in out.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "bad_line" and events[0]["line"] == 2
    assert [e["id"] for e in events if e["type"] == "task_result"] == ["b"]  # only the failed one again
    summary = events[-1]
    assert summary["type"] == "summary" and summary["tasks"] == 3 and summary["by_status"] == {"success": 2, "error": 1}
    assert len(env.requests) == first + 1


@pytest.mark.prepush
def test_batch_report_and_usage_errors(env: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = tmp_path / "tasks.jsonl"
    write_tasks(tasks, [{"id": "a", "prompt": "one"}])
    assert run_app(["batch", str(tasks), "-o", "r.jsonl"], capsys)[0] == 0
    code, out, _ = run_app(["batch", "report", "r.jsonl"], capsys)
    assert code == 0 and "1 tasks" in out and "success" in out
    assert run_app(["batch", "report", "missing.jsonl"], capsys)[0] == 2
    code, _, err = run_app(["batch", str(tasks)], capsys)
    assert code == 2 and "-o RESULTS.jsonl" in err
    code, _, err = run_app(["batch", "nope.jsonl", "-o", "r.jsonl"], capsys)
    assert code == 2 and "no such tasks file" in err
    code, _, err = run_app(["batch", str(tasks), "-o", str(tasks)], capsys)
    assert code == 2 and "must not be the tasks file" in err


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_says_how_to_resume(tmp_path: Path) -> None:
    def slow(req: RecordedRequest) -> Reply:
        prompt = user_words(next(m["content"] for m in req.body["messages"] if m["role"] == "user"))
        return Reply(content="quick" if prompt == "fast" else "slow", first_delay=0 if prompt == "fast" else 30)

    tasks = tmp_path / "tasks.jsonl"
    write_tasks(tasks, [{"id": "f", "prompt": "fast"}, {"id": "s", "prompt": "slow"}])
    with FakeServer([slow] * 4) as server:
        env = {**os.environ, "KIMI_API_KEY": "sk-test", "KIMI_BASE_URL": server.base_url}
        proc = subprocess.Popen(
            [*kimicode_command(), "batch", str(tasks), "-o", "r.jsonl"],
            cwd=tmp_path,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        results = tmp_path / "r.jsonl"
        deadline = time.monotonic() + 30
        while not (results.exists() and results.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130
    assert "1 finished, 1 left; resume with: kimicode batch" in err and "Traceback" not in err
    assert [json.loads(x)["id"] for x in results.read_text().splitlines()] == ["f"]


def test_progress_counts_on_a_terminal() -> None:
    import io

    from kimicode.batch.results import TaskResult
    from kimicode.batch.tasks import Task
    from kimicode.cli.batch_progress import Progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Tty()
    with Progress(3, fmt="text", out=io.StringIO(), err=err) as progress:
        for t in ("a", "b", "c"):
            progress.event("started", Task(t, "x"), 1)
        progress.event("retrying", Task("c", "x"), 2)
        assert progress.counts().startswith("done 0 · running 3 · failed 0 · retried 1")
        progress.result(
            TaskResult("a", "success", usage={"prompt_tokens": 1500, "completion_tokens": 500}, cost_usd=0.25)
        )
        progress.result(TaskResult("b", "error", error="HTTP 400\nmore"))
        assert progress.counts() == "done 2 · running 1 · failed 1 · retried 1 · 2.0k tokens · $0.2500"
    assert "done 2 · running 1 · failed 1" in err.getvalue() and "0/3" in err.getvalue()
