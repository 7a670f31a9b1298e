"""The Ray engine on a local Ray (started once for the module) with the fake server as the model:
results stream back, workspaces are prepared on the workers, a dead worker's task is retried."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kimicode.batch import TaskResult, run
from kimicode.prompts import user_words
from kimicode.testing import ErrorReply, FakeServer, RecordedRequest, Reply, ToolCall

ray = pytest.importorskip("ray", reason='Ray is not installed (pip install "kimicode[ray]"); CI installs it')

pytestmark = [pytest.mark.prepush, pytest.mark.xdist_group("ray")]  # Ray: one local cluster, on one xdist worker


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    # ray.init() sets RAY_AUTH_MODE=token in this process and leaves it: a later module's loopback cluster
    # (tests/branches/test_branches_ray.py, auth disabled) then had every actor creation cancelled. Keep the mode
    # the same as that cluster's and put the environment back afterwards.
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED")}
    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
            _node_ip_address="127.0.0.1",
        )  # loopback only, never the machine's interface
        yield
    finally:
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def collect(
    tasks: list[Any], server: FakeServer, tmp_path: Path, events: list[tuple[str, str, int]], **kw: Any
) -> dict[str, TaskResult]:
    async def go() -> dict[str, TaskResult]:
        out: dict[str, TaskResult] = {}
        # sandbox off: a task kills its worker with `kill -9 $PPID`, and inside the default bubblewrap
        # sandbox $PPID is the sandbox's own process, not the Ray worker
        async for r in run(
            tasks,
            engine="ray",
            concurrency=2,
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
            out[r.id] = r
        return out

    return asyncio.run(go())


def test_ray_runs_tasks_and_retries_a_lost_worker(local_ray: None, tmp_path: Path) -> None:
    killed: list[str] = []

    def script(req: RecordedRequest) -> Reply:
        prompt = user_words(req.body["messages"][1]["content"])
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


def test_actors_share_the_cpus_and_the_concurrency() -> None:
    from kimicode.batch.ray_engine import plan_actors

    assert plan_actors(1, 2) == (1, 1)
    assert plan_actors(32, 2) == (2, 16)
    assert plan_actors(5, 2) == (2, 3)
    assert plan_actors(3, 64) == (3, 1)
    assert plan_actors(8, 0.5) == (1, 8)


def test_a_429_on_one_worker_slows_the_tasks_of_another(local_ray: None, tmp_path: Path) -> None:
    stamps: dict[str, list[float]] = {"A": [], "B": []}
    limited: list[float] = []
    a_limited = threading.Event()

    def script(req: RecordedRequest) -> Reply | ErrorReply:
        p = user_words(next(m["content"] for m in req.body["messages"] if m["role"] == "user"))
        stamps[p].append(time.monotonic())
        if p == "A" and not limited:
            limited.append(time.monotonic())
            a_limited.set()
            return ErrorReply(429, "rate limit reached", "rate_limit_error", headers={"Retry-After": "2"})
        if p == "B" and req.body["messages"][-1]["role"] == "user":
            # B's first answer waits for A's 429 (actors start at their own pace on a loaded machine), so
            # B's second request is the one the shared gate must hold back
            assert a_limited.wait(60)
            return Reply(tool_calls=[ToolCall("bash", {"command": "true"})], first_delay=0.6)
        return Reply(content=f"ok {p}")

    events: list[tuple[str, str, int]] = []
    with FakeServer([script] * 10) as server:
        results = collect([{"id": "a", "prompt": "A"}, {"id": "b", "prompt": "B"}], server, tmp_path, events)
    assert results["a"].status == results["b"].status == "success"
    assert len(stamps["B"]) == 2
    # two actors (num_cpus=2), one task each: B never got a 429, yet its next request waited for A's
    # Retry-After, learnt through the gate actor (within its 0.25 s refresh)
    assert stamps["B"][1] - limited[0] >= 1.7
    assert stamps["A"][1] - limited[0] >= 1.95
