"""The local engine on several processes: `processes` event loops, one per core, sharing one 429 gate.

One event loop runs an agent step in ~4-6 ms of CPU (most of it the openai SDK and httpx building and
parsing HTTP), so one process tops out near 40 tasks a second of 6 steps: plenty for real model latencies
(a 1-3 s step keeps hundreds of tasks busy), not for very fast endpoints or thousands of tasks at once.
With `processes` > 1 the driver hands tasks to worker processes (spawned, so nothing of the driver's state
is inherited), each running up to its share of `concurrency` with the in-process engine; results and
progress events come back over a queue and are yielded as they finish, so result lines, resume and retries
are the same as with one process.

The gate is shared through memory: a 429 in any worker closes it (a `monotonic` deadline, which is
system-wide on Linux and macOS) for every task in every worker, read without any message passing.
A worker that dies (killed, out of memory) is replaced and its unfinished tasks run again, counted as
attempts like any other crash. Workers ignore SIGINT: Ctrl-C reaches the driver, which stops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import multiprocessing
import queue
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from kimicode.batch.limiter import SharedRateLimiter
from kimicode.batch.results import TaskResult
from kimicode.batch.runner import BatchOptions
from kimicode.batch.tasks import Task, notify

OnEvent = Callable[[str, Task, int], None]


class ProcessGate:
    """Implements `kimicode.llm.client.RateGate` over shared memory: the same gate in every process."""

    def __init__(self, until: Any, throttles: Any, max_delay: float = 600.0) -> None:
        self._until = until
        self._throttles = throttles
        self.max_delay = max_delay

    async def wait(self) -> None:
        while True:
            delay = self._until.value - time.monotonic()
            if delay <= 0:
                return
            await asyncio.sleep(delay)

    @property
    def throttles(self) -> int:
        """How many times a worker was told to slow down (429s), across the processes."""
        return int(self._throttles.value)

    def throttled(self, delay: float) -> None:
        delay = min(max(delay, 0.0), self.max_delay)
        with self._until.get_lock():
            self._until.value = max(self._until.value, time.monotonic() + delay)
        with self._throttles.get_lock():
            self._throttles.value += 1


def _worker(inbox: Any, outbox: Any, opts: BatchOptions, gate: ProcessGate, slots: int, max_attempts: int) -> None:
    """A worker process: run tasks from `inbox`, up to `slots` at once, sending events and results back."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(_serve(inbox, outbox, opts, gate, slots, max_attempts))


async def _serve(inbox: Any, outbox: Any, opts: BatchOptions, gate: ProcessGate, slots: int, max_attempts: int) -> None:
    from kimicode.batch.local import attempt_with_retries, batch_context

    loop = asyncio.get_running_loop()
    http, ctx = batch_context()
    running: set[asyncio.Task[None]] = set()
    ended = False

    def on_event(kind: str, task: Task, attempt: int) -> None:
        outbox.put(("event", kind, task.id, attempt))

    async def one(task: Task, first: int) -> None:
        result = await attempt_with_retries(task, opts, gate, max_attempts, on_event, first_attempt=first)
        outbox.put(("result", task.id, result.to_json()))

    while not ended or running:
        if not ended and len(running) < slots:
            item = await loop.run_in_executor(None, inbox.get)
            if item is None:
                ended = True
                continue
            task, first = item
            running.add(asyncio.create_task(one(task, first), context=ctx))
            continue
        done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        running.difference_update(done)
        for fut in done:
            fut.result()
    await http.aclose()


def _read_results(
    outbox: Any, loop: asyncio.AbstractEventLoop, arrivals: asyncio.Queue[Any], stop: threading.Event
) -> None:
    """The workers' queue blocks: read it in a thread and hand each message to the loop (a `tick` when
    nothing came for a while, so the loop looks for dead workers)."""
    while not stop.is_set():
        try:
            msg = outbox.get(timeout=0.2)
        except queue.Empty:
            msg = ("tick",)
        except (EOFError, OSError, ValueError):
            return
        try:
            loop.call_soon_threadsafe(arrivals.put_nowait, msg)
        except RuntimeError:  # the loop is closed: the batch is over
            return


async def run_processes(
    tasks: Iterable[Task],
    opts: BatchOptions,
    *,
    processes: int,
    concurrency: int = 4,
    max_attempts: int = 3,
    limiter: SharedRateLimiter | None = None,
    on_event: OnEvent | None = None,
) -> AsyncIterator[TaskResult]:
    """Yield each task's result as it finishes, from `processes` worker processes; closing stops them."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1 (got {concurrency})")
    count = max(1, min(processes, concurrency))
    slots = math.ceil(concurrency / count)
    mp = multiprocessing.get_context("spawn")
    gate = ProcessGate(mp.Value("d", 0.0), mp.Value("i", 0))
    outbox: Any = mp.Queue()
    workers: list[tuple[Any, Any]] = []
    assigned: list[dict[str, int]] = []  # per worker: task id -> the attempt it started with
    by_id: dict[str, Task] = {}
    attempts: dict[str, int] = {}
    pending = iter(tasks)
    loop = asyncio.get_running_loop()
    arrivals: asyncio.Queue[Any] = asyncio.Queue()
    stop_reader = threading.Event()

    def start_worker() -> tuple[Any, Any]:
        inbox: Any = mp.Queue()
        proc = mp.Process(
            target=_worker,
            args=(inbox, outbox, opts, gate, slots, max_attempts),
            daemon=True,
            name="kimicode-batch-worker",
        )
        proc.start()
        return proc, inbox

    def give(index: int, task: Task, first: int) -> None:
        by_id[task.id] = task
        assigned[index][task.id] = first
        workers[index][1].put((task, first))

    def fill() -> None:
        for index in range(len(workers)):
            while len(assigned[index]) < slots:
                task = next(pending, None)
                if task is None:
                    return
                give(index, task, 1)

    for _ in range(count):
        workers.append(start_worker())
        assigned.append({})
    thread = threading.Thread(
        target=_read_results, args=(outbox, loop, arrivals, stop_reader), daemon=True, name="kimicode-batch-results"
    )
    thread.start()
    try:
        fill()
        while any(assigned):
            msg = await arrivals.get()
            if msg[0] == "event":
                _, kind, task_id, attempt = msg
                attempts[task_id] = attempt
                if task_id in by_id:
                    notify(on_event, kind, by_id[task_id], attempt)
            elif msg[0] == "result":
                _, task_id, line = msg
                for owned in assigned:
                    owned.pop(task_id, None)
                yield TaskResult.from_dict(json.loads(line))
                fill()
            for index, (proc, _inbox) in enumerate(workers):
                if proc.is_alive() or not assigned[index]:
                    continue
                lost, assigned[index] = assigned[index], {}  # a dead worker: its tasks run again elsewhere
                workers[index] = start_worker()
                for task_id in lost:
                    task, attempt = by_id[task_id], attempts.get(task_id, 1)
                    if attempt >= max_attempts:
                        yield TaskResult(
                            task.id,
                            "crashed",
                            error=f"gave up after {attempt} attempts: its worker "
                            f"process died (exit code {proc.exitcode})",
                            error_kind="internal",
                            attempts=attempt,
                            metadata=dict(task.metadata),
                        )
                        continue
                    give(index, task, attempt + 1)
                fill()
    finally:
        stop_reader.set()
        await asyncio.to_thread(thread.join, 2)
        for proc, inbox in workers:
            with contextlib.suppress(Exception):
                inbox.put(None)
            if any(assigned):
                proc.terminate()
        for proc, _inbox in workers:
            await asyncio.to_thread(proc.join, 5)
            if proc.is_alive():
                proc.kill()
        if limiter is not None:
            limiter.throttles += gate.throttles
