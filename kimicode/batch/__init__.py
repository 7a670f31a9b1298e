"""Many tasks at once: `kimicode batch` and the library call `kimicode.batch.run`.

Each task runs in its own workspace and KIMICODE_HOME area; results stream back as tasks finish.
Engines: `local` (asyncio, one process, a shared rate limiter) and `ray` (Ray tasks on a cluster).
See docs/batch.md.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from kimicode.batch.limiter import SharedRateLimiter
from kimicode.batch.results import TaskResult, read_results
from kimicode.batch.runner import BatchOptions
from kimicode.batch.tasks import BadLine, Task, TaskError, load_tasks, parse_lines, task_from_dict

__all__ = [
    "BadLine",
    "BatchOptions",
    "SharedRateLimiter",
    "Task",
    "TaskError",
    "TaskResult",
    "load_tasks",
    "parse_lines",
    "read_results",
    "run",
]

ENGINES = ("local", "ray")


def _checked(tasks: Iterable[Task | Mapping[str, Any]]) -> list[Task]:
    """The tasks as `Task`s; TaskError for a bad one, a duplicate id, or two tasks in place in one directory."""
    checked: list[Task] = [t if isinstance(t, Task) else task_from_dict(dict(t)) for t in tasks]
    seen: set[str] = set()
    in_place: set[Path] = set()
    for t in checked:
        if t.id in seen:
            raise TaskError(f"duplicate task id {t.id!r}")
        seen.add(t.id)
        if t.in_place and t.workspace is not None:
            where = Path(t.workspace).expanduser().resolve()
            if where in in_place:
                raise TaskError(f"two tasks work in place in {where} (task {t.id!r})")
            in_place.add(where)
    return checked


async def run(
    tasks: Iterable[Task | Mapping[str, Any]],
    engine: str = "local",
    concurrency: int = 4,
    *,
    root: str | Path | None = None,
    max_attempts: int = 3,
    address: str | None = None,
    limiter: SharedRateLimiter | None = None,
    on_event: Callable[[str, Task, int], None] | None = None,
    processes: int = 1,
    **options: Any,
) -> AsyncIterator[TaskResult]:
    """Run `tasks` and yield each `TaskResult` as it finishes (not in input order).

    `tasks` are `Task`s or task-line dicts (a bad dict raises TaskError before anything runs).
    `on_event(kind, task, attempt)` is called when a task starts (`started`) or is retried (`retrying`).
    `root` keeps the tasks' workspaces and homes (default: a new temporary directory).
    `processes` > 1 runs the local engine's tasks in that many worker processes (their options must pickle;
    see kimicode/batch/multiproc.py).
    `options` are `BatchOptions` fields: model, base_url, api_key, permission_mode, max_turns,
    timeout, budget_usd, diff, persist, agent_options, ...
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)} (got {engine!r})")
    checked = _checked(tasks)
    base = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="kimicode-batch-"))
    opts = BatchOptions(root=base.resolve(), **options)
    if engine == "ray":
        from kimicode.batch.ray_engine import run_ray

        async for result in run_ray(
            checked, opts, concurrency=concurrency, max_attempts=max_attempts, address=address, on_event=on_event
        ):
            yield result
        return
    if processes < 1:
        raise ValueError(f"processes must be at least 1 (got {processes})")
    if processes > 1:
        from kimicode.batch.multiproc import run_processes

        async for result in run_processes(
            checked,
            opts,
            processes=processes,
            concurrency=concurrency,
            max_attempts=max_attempts,
            limiter=limiter,
            on_event=on_event,
        ):
            yield result
        return
    from kimicode.batch.local import run_local

    async for result in run_local(
        checked, opts, concurrency=concurrency, max_attempts=max_attempts, limiter=limiter, on_event=on_event
    ):
        yield result
