"""The Ray engine on a local Ray (started once for the module) with the fake server as the model:
results stream back, workspaces are prepared on the workers, a dead worker's task is retried."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kimicode.batch import TaskResult, run
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

ray = pytest.importorskip("ray", reason='Ray is not installed (pip install "kimicode[ray]"); CI installs it')


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


def collect(tasks: list[Any], server: FakeServer, tmp_path: Path, events: list[tuple[str, str, int]],
            **kw: Any) -> dict[str, TaskResult]:
    async def go() -> dict[str, TaskResult]:
        out: dict[str, TaskResult] = {}
        # sandbox off: a task kills its worker with `kill -9 $PPID`, and inside the default bubblewrap
        # sandbox $PPID is the sandbox's own process, not the Ray worker
        async for r in run(tasks, engine="ray", concurrency=2, root=tmp_path / "b", base_url=server.base_url,
                           api_key="sk-test", model="kimi-k3", permission_mode="yolo", retry_base_delay=0.01,
                           on_event=lambda kind, t, n: events.append((kind, t.id, n)),
                           agent_options={"sandbox": "off"}, **kw):
            out[r.id] = r
        return out

    return asyncio.run(go())


def test_ray_runs_tasks_and_retries_a_lost_worker(local_ray: None, tmp_path: Path) -> None:
    killed: list[str] = []

    def script(req: RecordedRequest) -> Reply:
        prompt = req.body["messages"][1]["content"]
        if req.body["messages"][-1]["role"] != "user":
            return Reply(content=f"done {prompt}")
        if prompt == "die" and not killed:
            killed.append(prompt)  # the worker running this task kills itself: a lost worker
            return Reply(tool_calls=[ToolCall("bash", {"command": "kill -9 $PPID"})])
        return Reply(tool_calls=[ToolCall("write_file", {"path": f"{prompt}.txt", "content": prompt})])

    events: list[tuple[str, str, int]] = []
    tasks = [{"id": p, "prompt": p} for p in ("one", "two", "die")]
    with FakeServer([script] * 20) as server:
        results = collect(tasks, server, tmp_path, events)
    assert set(results) == {"one", "two", "die"}
    for name in ("one", "two"):
        r = results[name]
        assert r.status == "success" and r.changed_files == [f"{name}.txt"] and r.attempts == 1
        assert Path(str(r.workspace), f"{name}.txt").read_text() == name
    die = results["die"]
    assert killed and die.status == "success" and die.attempts == 2 and die.changed_files == ["die.txt"]
    assert ("retrying", "die", 2) in events


def test_ray_gives_up_after_max_attempts(local_ray: None, tmp_path: Path) -> None:
    def always_die(req: RecordedRequest) -> Reply:
        return Reply(tool_calls=[ToolCall("bash", {"command": "kill -9 $PPID"})])

    events: list[tuple[str, str, int]] = []
    with FakeServer([always_die] * 10) as server:
        results = collect([{"id": "x", "prompt": "x"}], server, tmp_path, events, max_attempts=2)
    assert results["x"].status == "crashed" and results["x"].attempts == 2
    assert "gave up after 2 attempts" in str(results["x"].error)
