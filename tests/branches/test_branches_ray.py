"""Branches (`--engine ray`) and batch tasks on a two-node Ray cluster started with `ray start` on this machine.

One cluster for the module (two nodes of one CPU each, on 127.0.0.1: see tests/ray_cluster.py); each
branch is resumed from its log and run in a Ray actor.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from branches_helpers import GOOD, GOOD_BIG, VERIFY, WRONG, Router, git_project, write_turn
from ray_cluster import LOOPBACK_ENV, LoopbackCluster

from kimicode import Agent
from kimicode.testing import FakeServer

ray = pytest.importorskip("ray", reason='Ray is not installed (pip install "kimicode[ray]"); CI installs it')
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one Ray at a time, on one xdist worker


@pytest.fixture(scope="module")
def cluster() -> Iterator[LoopbackCluster]:
    c = LoopbackCluster(Path(tempfile.mkdtemp(prefix="kcray-")))  # short: Ray's socket paths must fit 107 bytes
    mp = pytest.MonkeyPatch()
    for k, v in LOOPBACK_ENV.items():
        mp.setenv(k, v)
    from ray._private import ray_constants

    mp.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)  # read when ray was imported: the driver keeps 127.0.0.1
    try:
        c.start()
        ray.init(address=c.address, log_to_driver=False, logging_level="ERROR")
        yield c
    finally:
        ray.shutdown()
        c.stop()
        mp.undo()
        shutil.rmtree(c.root, ignore_errors=True)


def test_the_cluster_has_two_nodes_on_loopback(cluster: LoopbackCluster) -> None:
    alive = [n for n in ray.nodes() if n["Alive"]]
    assert len(alive) == 2 and {n["NodeManagerAddress"] for n in alive} == {"127.0.0.1"}


def test_an_exploration_runs_on_the_cluster_and_applies_the_verified_branch(
    cluster: LoopbackCluster, make_agent: Any, server: FakeServer, workspace: Path
) -> None:
    from kimicode.batch.branch_ray import RayEngine

    git_project(workspace)
    router = Router(server, {"1": write_turn(WRONG), "2": write_turn(GOOD_BIG), "3": write_turn(GOOD, "small")})
    parent: Agent = make_agent(permission_mode="accept-edits", sandbox="off")

    async def go() -> Any:
        try:
            return await parent.explore("fix add", n=3, verify=VERIFY, engine=RayEngine(cluster.address))
        finally:
            await parent.aclose()

    ex = asyncio.run(go())
    by_k = {b.k: b for b in ex.branches}
    assert [by_k[k].status for k in (1, 2, 3)] == ["failed", "verified", "verified"], by_k[1].error
    assert ex.chosen is by_k[3] and ex.applied is by_k[3]
    assert (workspace / "app.py").read_text() == GOOD
    assert ex.answer(by_k[3]) == "small" and parent.messages[-1]["content"] == "small"
    keys = {r.body.get("prompt_cache_key") for rs in router.by_branch.values() for r in rs}
    assert keys == {parent.session_id}


def test_batch_tasks_run_on_the_same_cluster(cluster: LoopbackCluster, server: FakeServer, tmp_path: Path) -> None:
    from kimicode.batch import run
    from kimicode.testing import Reply, ToolCall

    def script(req: Any) -> Reply:  # either task may ask first: answer by where its conversation is
        if req.body["messages"][-1]["role"] == "user":
            return Reply(tool_calls=[ToolCall("write_file", {"path": "out.txt", "content": "x"})])
        return Reply(content="ok")

    server.add(*[script] * 4)

    async def go() -> list[Any]:
        return [
            r
            async for r in run(
                [{"id": "a", "prompt": "a"}, {"id": "b", "prompt": "b"}],
                engine="ray",
                concurrency=2,
                root=tmp_path / "b",
                address=cluster.address,
                base_url=server.base_url,
                api_key="sk-test",
                model="kimi-k3",
                permission_mode="yolo",
                retry_base_delay=0.01,
                agent_options={"sandbox": "off"},
            )
        ]

    results = asyncio.run(go())
    assert sorted(r.status for r in results) == ["success", "success"]
    assert all(r.changed_files == ["out.txt"] for r in results)
