"""The local engine: up to `concurrency` tasks at once on one asyncio event loop, one shared rate limiter."""

from __future__ import annotations

import asyncio
import contextvars
import traceback
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Any

from kimicode.batch.limiter import SharedRateLimiter
from kimicode.batch.results import TaskResult
from kimicode.batch.runner import BatchOptions, run_task
from kimicode.batch.tasks import Task, notify

if TYPE_CHECKING:
    from kimicode.llm.client import RateGate

OnEvent = Callable[[str, Task, int], None]
"""Progress callback: (`started` | `retrying`, task, attempt)."""


async def attempt_with_retries(
    task: Task,
    opts: BatchOptions,
    gate: RateGate | None,
    max_attempts: int,
    on_event: OnEvent | None = None,
    first_attempt: int = 1,
) -> TaskResult:
    """Run `task`, again after a crash (an exception out of the runner) up to `max_attempts` times
    (counting from `first_attempt`: a task whose worker process died has used attempts already)."""
    last = last_tb = ""
    for attempt in range(first_attempt, max_attempts + 1):
        notify(on_event, "started" if attempt == 1 else "retrying", task, attempt)
        try:
            return await run_task(task, opts, gate, attempt)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a crash of this task only (a hook's pytest.fail is a BaseException):
            # record it, retry, never stop the batch
            last = f"{type(exc).__name__}: {exc}"
            last_tb = traceback.format_exc(limit=5)
    return TaskResult(
        task.id,
        "crashed",
        error=f"gave up after {max_attempts} attempts: {last}\n{last_tb}",
        error_kind="internal",
        attempts=max_attempts,
        metadata=dict(task.metadata),
    )


async def run_local(
    tasks: Iterable[Task],
    opts: BatchOptions,
    *,
    concurrency: int = 4,
    max_attempts: int = 3,
    limiter: SharedRateLimiter | None = None,
    on_event: OnEvent | None = None,
) -> AsyncIterator[TaskResult]:
    """Yield each task's result as it finishes; closing the iterator early cancels the running tasks."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1 (got {concurrency})")
    gate = limiter if limiter is not None else SharedRateLimiter()
    pending = iter(tasks)
    running: set[asyncio.Task[TaskResult]] = set()
    http, ctx = batch_context()

    def start_next() -> bool:
        task = next(pending, None)
        if task is None:
            return False
        coro = attempt_with_retries(task, opts, gate, max_attempts, on_event)
        running.add(asyncio.create_task(coro, context=ctx))
        return True

    try:
        while len(running) < concurrency and start_next():
            pass
        while running:
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                running.discard(fut)
                yield fut.result()
                start_next()
            while len(running) < concurrency and start_next():
                pass
    finally:
        for fut in running:
            fut.cancel()
        if running:
            await asyncio.wait(running)
        await http.aclose()


def batch_context() -> tuple[Any, contextvars.Context]:
    """A connection pool and the context the tasks of one event loop run in: one pool and one window
    discovery for all of them (see `kimicode.llm.client.share_connections`). The caller closes the pool."""
    from kimicode.llm.client import new_http_client, share_connections
    from kimicode.llm.discovery import share_windows

    http = new_http_client()
    ctx = share_connections(http)
    ctx.run(share_windows)
    return http, ctx
