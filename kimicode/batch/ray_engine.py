"""The Ray engine: each task is a Ray task; workspaces are prepared on the worker; results stream back.

Uses an existing cluster (`address`, or RAY_ADDRESS) or starts a local Ray for the run. At most
`concurrency` tasks are in flight; `ray.wait` returns them as they finish. A task whose worker dies
(or whose run raises) is submitted again, up to `max_attempts`. Retries are kimicode's, not Ray's
(`max_retries=0`), so each one is counted and reported.

The API key is not shipped to workers unless the library caller passed `api_key` explicitly: workers read
it from their own environment (a local Ray inherits the driver's), so it never enters Ray's object store.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from kimicode.batch.results import TaskResult
from kimicode.batch.runner import BatchOptions
from kimicode.batch.tasks import Task

OnEvent = Callable[[str, Task, int], None]


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError('the ray engine needs Ray: pip install "kimicode[ray]"') from None
    return ray


def _execute(task: Task, opts: BatchOptions, attempt: int) -> str:
    """Runs on the worker: the whole task, returning its result line."""
    from kimicode.batch.runner import run_task

    result = asyncio.run(run_task(task, opts, None, attempt))
    return result.to_json()


async def run_ray(
    tasks: Iterable[Task],
    opts: BatchOptions,
    *,
    concurrency: int = 4,
    max_attempts: int = 3,
    address: str | None = None,
    on_event: OnEvent | None = None,
) -> AsyncIterator[TaskResult]:
    """Yield each task's result as its Ray task finishes; closing early cancels what is in flight."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1 (got {concurrency})")
    ray = _import_ray()
    started = False
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
        started = True
    remote = ray.remote(max_retries=0, num_cpus=1)(_execute)
    pending = iter(tasks)
    inflight: dict[Any, tuple[Task, int]] = {}

    def submit(task: Task, attempt: int) -> None:
        if on_event is not None:
            on_event("started" if attempt == 1 else "retrying", task, attempt)
        inflight[remote.remote(task, opts, attempt)] = (task, attempt)

    def fill() -> None:
        while len(inflight) < concurrency:
            task = next(pending, None)
            if task is None:
                return
            submit(task, 1)

    try:
        fill()
        while inflight:
            ready, _ = await asyncio.to_thread(ray.wait, list(inflight), num_returns=1, timeout=1.0)
            for ref in ready:
                task, attempt = inflight.pop(ref)
                try:
                    line = await asyncio.to_thread(ray.get, ref)
                except Exception as exc:  # the worker died or the task raised: retry it, never stop the batch
                    if attempt < max_attempts:
                        submit(task, attempt + 1)
                        continue
                    yield TaskResult(
                        task.id, "crashed", error=f"gave up after {attempt} attempts: {type(exc).__name__}: "
                        f"{str(exc)[-2000:]}", error_kind="internal", attempts=attempt, metadata=dict(task.metadata),
                    )
                    continue
                yield TaskResult.from_dict(json.loads(line))
            fill()
    finally:
        for ref in inflight:
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()
