"""Branches on a Ray cluster (`--branches N --engine ray`): each branch's turn and verify run in a Ray actor.

The driver forks the branches as the local engine does (their session logs and workspaces are written
on the driver's machine), then each actor resumes its branch from its log and runs it, so the nodes must
see the driver's KIMICODE_HOME and workspaces at the same paths (one machine, or a shared file system);
a branch whose workspace a node cannot see fails with a message saying so. Like batch tasks, the
branches share one rate gate across workers (`kimicode.batch.ray_gate`) and each actor's branches share
its HTTP pool; every branch sends the parent's prompt cache key. A branch whose actor dies (a lost worker
or node) is resumed from its log on a new actor, once.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from kimicode.branches.record import Branch, ExplorationRecord
from kimicode.branches.run import Job

MAX_ATTEMPTS = 2


class BranchActor:
    """A Ray worker running branches on its own event loop (made an async actor by `RayEngine.run`)."""

    def __init__(self, gate_name: str) -> None:
        self._gate_name = gate_name
        self._gate: Any = None
        self._ctx: Any = None
        self._http: Any = None

    async def run(self, options: Any, branch: dict[str, Any], job: Job) -> str:
        """Resume the branch from its log, run it, return the branch as JSON."""
        from kimicode.agent.core import Agent
        from kimicode.branches.run import run_branch

        b = Branch.from_dict(branch)
        if not _visible(b.workspace, str(options.home)):
            import socket

            b.status = "error"
            b.error = (
                f"the Ray node {socket.gethostname()} cannot see the branch's workspace {b.workspace} or "
                f"KIMICODE_HOME {options.home}: branches on Ray need them on a file system every node sees"
            )
            return json.dumps(b.to_dict())
        if self._ctx is None:
            import ray

            from kimicode.batch.local import batch_context
            from kimicode.batch.ray_gate import RayGate

            self._http, self._ctx = batch_context()
            self._gate = RayGate(ray.get_actor(self._gate_name))
        variant: dict[str, Any] = {k: v for k, v in (("model", b.model), ("thinking", b.thinking)) if v}
        agent = Agent.resume(str(b.session_id), options=options, workspace=b.workspace, **variant)
        try:
            await asyncio.create_task(run_branch(agent, b, job, self._gate), context=self._ctx)
        finally:
            await agent.aclose()
        return json.dumps(b.to_dict())


def _visible(*paths: str | None) -> bool:
    return all(p and os.path.isdir(p) for p in paths)


class RayEngine:
    """Implements `kimicode.branches.explore.Engine` on a Ray cluster (`address`, else RAY_ADDRESS, else a
    local Ray started for the exploration)."""

    def __init__(self, address: str | None = None) -> None:
        self.address = address

    async def run(
        self, parent: Any, record: ExplorationRecord, job: Job, branches: Sequence[Branch]
    ) -> AsyncIterator[Branch]:
        from kimicode.batch.ray_engine import import_ray
        from kimicode.batch.ray_gate import gate_actor

        ray = import_ray()
        started = False
        if not ray.is_initialized():
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
            started = True
        gate_name = f"kimicode-branches-gate-{uuid.uuid4().hex[:12]}"
        gate = gate_actor(ray, gate_name)
        cpus = ray.cluster_resources().get("CPU", 1)
        count = max(1, min(len(branches), int(cpus)))
        per_actor = math.ceil(max(1, len(branches)) / count)
        actor_cls = ray.remote(num_cpus=1, max_restarts=0, max_concurrency=per_actor)(BranchActor)
        actors = [actor_cls.remote(gate_name) for _ in range(count)]
        options = parent.options.replace(workspace=parent.workspace, home=parent.home)
        inflight: dict[asyncio.Future[Any], tuple[Branch, int, int]] = {}

        def submit(b: Branch, attempt: int, slot: int) -> None:
            ref = actors[slot].run.remote(options, b.to_dict(), job)
            inflight[asyncio.wrap_future(ref.future())] = (b, attempt, slot)

        try:
            for i, b in enumerate(branches):
                submit(b, 1, i % count)
            while inflight:
                done, _ = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    b, attempt, slot = inflight.pop(fut)
                    try:
                        yield Branch.from_dict(json.loads(fut.result()))
                    except Exception as exc:  # the actor died (lost worker or node): resume the branch elsewhere
                        if isinstance(exc, ray.exceptions.RayActorError):
                            actors[slot] = actor_cls.remote(gate_name)
                        if attempt < MAX_ATTEMPTS:
                            submit(b, attempt + 1, slot)
                            continue
                        b.status = "crashed"
                        b.error = f"its Ray worker failed {attempt} times: {type(exc).__name__}: {str(exc)[-500:]}"
                        yield b
        finally:
            for fut in inflight:
                fut.cancel()
            for actor in actors:
                ray.kill(actor)
            ray.kill(gate)
            if started:
                ray.shutdown()
