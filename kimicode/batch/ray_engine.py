"""The Ray engine: tasks run on async Ray actors, workspaces are prepared on the worker, results stream back.

Uses an existing cluster (`address`, or RAY_ADDRESS) or starts a local Ray for the run. One actor per CPU
of the cluster (at most `concurrency`), each an asyncio loop running up to its share of the `concurrency`
tasks at once, as the local engine does in one process: a task that mostly waits for the model costs a
coroutine, not a CPU. The tasks of one actor share its HTTP connections and its window discovery; all
of them share one rate gate, a named actor (`kimicode.batch.ray_gate`), so a 429 slows every worker.

A task whose actor dies (a lost worker, a killed process, a node gone) or whose run raises is submitted
again, up to `max_attempts`; a dead actor is replaced. Retries are kimicode's, not Ray's, so each one is
counted and reported. The API key is not shipped to workers unless the library caller passed `api_key`
explicitly: workers read it from their own environment (a local Ray inherits the driver's).
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from kimicode.batch.results import TaskResult
from kimicode.batch.runner import BatchOptions
from kimicode.batch.tasks import Task, notify

OnEvent = Callable[[str, Task, int], None]


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError('the ray engine needs Ray: pip install "kimicode[ray]"') from None
    return ray


class TaskActor:
    """A Ray worker running many tasks on its own event loop (made an async actor by `run_ray`)."""

    def __init__(self, gate_name: str | None) -> None:
        self._gate_name = gate_name
        self._gate: Any = None
        self._ctx: Any = None
        self._http: Any = None

    async def run(self, task: Task, opts: BatchOptions, attempt: int) -> str:
        """The whole task, on this actor's loop; returns its result line."""
        from kimicode.batch.runner import run_task

        if self._ctx is None:
            from kimicode.batch.local import batch_context

            self._http, self._ctx = batch_context()  # made on the actor's loop, used only there
            if self._gate_name is not None:
                import ray

                from kimicode.batch.ray_gate import RayGate

                self._gate = RayGate(ray.get_actor(self._gate_name))
        result = await asyncio.create_task(run_task(task, opts, self._gate, attempt), context=self._ctx)
        return result.to_json()

    def pid(self) -> int:
        import os

        return os.getpid()


def plan_actors(concurrency: int, cpus: float) -> tuple[int, int]:
    """(actors, tasks per actor): one actor per whole CPU, at most `concurrency`, sharing the concurrency."""
    actors = max(1, min(concurrency, int(cpus)))
    return actors, math.ceil(concurrency / actors)


async def run_ray(
    tasks: Iterable[Task],
    opts: BatchOptions,
    *,
    concurrency: int = 4,
    max_attempts: int = 3,
    address: str | None = None,
    on_event: OnEvent | None = None,
) -> AsyncIterator[TaskResult]:
    """Yield each task's result as it finishes; closing early cancels what is in flight."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1 (got {concurrency})")
    ray = import_ray()
    started = False
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
        started = True
    from kimicode.batch.ray_gate import gate_actor

    gate_name = f"kimicode-batch-gate-{uuid.uuid4().hex[:12]}"
    gate = gate_actor(ray, gate_name)
    count, per_actor = plan_actors(concurrency, ray.cluster_resources().get("CPU", 1))
    actor_cls = ray.remote(num_cpus=1, max_restarts=0, max_concurrency=per_actor)(TaskActor)
    actors: list[Any] = [actor_cls.remote(gate_name) for _ in range(count)]
    load = [0] * count
    pending = iter(tasks)
    inflight: dict[asyncio.Future[Any], tuple[Task, int, int, Any, Any]] = {}

    def submit(task: Task, attempt: int) -> None:
        notify(on_event, "started" if attempt == 1 else "retrying", task, attempt)
        slot = min(range(count), key=load.__getitem__)  # the least busy actor
        load[slot] += 1
        ref = actors[slot].run.remote(task, opts, attempt)
        inflight[asyncio.wrap_future(ref.future())] = (task, attempt, slot, actors[slot], ref)

    def fill() -> None:
        while len(inflight) < concurrency:
            task = next(pending, None)
            if task is None:
                return
            submit(task, 1)

    try:
        fill()
        while inflight:
            done, _ = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                task, attempt, slot, actor, _ref = inflight.pop(fut)
                load[slot] -= 1
                try:
                    line = fut.result()
                except Exception as exc:  # the worker died or the task raised: retry it, never stop the batch
                    if isinstance(exc, ray.exceptions.RayActorError) and actors[slot] is actor:
                        actors[slot] = actor_cls.remote(gate_name)  # a lost worker: start another in its place
                    if attempt < max_attempts:
                        submit(task, attempt + 1)
                        continue
                    yield TaskResult(
                        task.id,
                        "crashed",
                        error=f"gave up after {attempt} attempts: {type(exc).__name__}: {str(exc)[-2000:]}",
                        error_kind="internal",
                        attempts=attempt,
                        metadata=dict(task.metadata),
                    )
                    continue
                yield TaskResult.from_dict(json.loads(line))
            fill()
    finally:
        for fut in inflight:
            fut.cancel()
        for actor in actors:
            ray.kill(actor)
        ray.kill(gate)
        if started:
            ray.shutdown()
