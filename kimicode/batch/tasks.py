"""Task lines: parsing TASKS.jsonl into `Task`s, with every bad line reported by its line number."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from kimicode.config.choices import EFFORTS, PERMISSION_MODES

MODES = PERMISSION_MODES
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,199}$")


class TaskError(ValueError):
    """A task that cannot run as written (the message says which field and why)."""


@dataclass(frozen=True)
class Task:
    """One unit of a batch: a prompt and where to work, plus per-task options.

    Exactly one of `workspace` (a directory: copied unless `in_place`) or `repo` (cloned, at `ref`
    when given) says where; with neither the task gets an empty directory.
    """

    id: str
    prompt: str
    workspace: str | None = None
    in_place: bool = False
    repo: str | None = None
    ref: str | None = None
    model: str | None = None
    thinking: str | None = None
    permission_mode: str | None = None
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    max_turns: int | None = None
    timeout: float | None = None
    """Seconds the whole task may take (then status `timeout`)."""
    budget_usd: float | None = None
    """Stop the task when its cost passes this (status `budget`)."""
    append_system_prompt: str | None = None
    system_prompt: str | None = None
    diff: bool | None = None
    """Put the workspace's diff in the result line (default: the batch's --diff)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Anything the caller wants copied into the result line (e.g. the expected answer's key)."""

    def __post_init__(self) -> None:
        check(self)


def _str(name: str, value: Any, *, optional: bool = True) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not value.strip():
        raise TaskError(f"{name} must be a non-empty string")


def check(task: Task) -> None:
    """Raise TaskError for a task that cannot run."""
    if not isinstance(task.id, str) or not _ID.match(task.id):
        raise TaskError(
            "id must be 1-200 characters of letters, digits and ._:@+=- starting with a letter or digit "
            f"(got {task.id!r})"
        )
    _str("prompt", task.prompt, optional=False)
    for name in ("workspace", "repo", "ref", "model", "append_system_prompt", "system_prompt"):
        _str(name, getattr(task, name))
    _check_places(task)
    _check_choices(task)
    _check_values(task)


def _check_places(task: Task) -> None:
    """Where the task runs: a workspace or a repository (with its ref), never both."""
    if task.workspace is not None and task.repo is not None:
        raise TaskError("give either workspace or repo, not both")
    if task.ref is not None and task.repo is None:
        raise TaskError("ref needs repo")
    if task.in_place and task.workspace is None:
        raise TaskError("in_place needs workspace")


def _check_choices(task: Task) -> None:
    """Effort, permission mode and rules: one of the names kimicode knows."""
    if task.thinking is not None and task.thinking not in EFFORTS:
        raise TaskError(f"thinking must be low, high or max (got {task.thinking!r})")
    if task.permission_mode is not None and task.permission_mode not in MODES:
        raise TaskError(f"permission_mode must be one of {', '.join(MODES)} (got {task.permission_mode!r})")
    for name in ("allow", "deny"):
        value = getattr(task, name)
        if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
            raise TaskError(f"{name} must be a list of rule strings")


def _check_values(task: Task) -> None:
    """Limits are positive numbers, switches booleans, metadata an object."""
    if task.max_turns is not None and (
        isinstance(task.max_turns, bool) or not isinstance(task.max_turns, int) or task.max_turns < 1
    ):
        raise TaskError(f"max_turns must be a positive integer (got {task.max_turns!r})")
    for name in ("timeout", "budget_usd"):
        value = getattr(task, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
            raise TaskError(f"{name} must be a positive number (got {value!r})")
    for name in ("in_place",):
        if not isinstance(getattr(task, name), bool):
            raise TaskError(f"{name} must be true or false")
    if task.diff is not None and not isinstance(task.diff, bool):
        raise TaskError("diff must be true or false")
    if not isinstance(task.metadata, Mapping):
        raise TaskError("metadata must be an object")


_FIELDS = {f.name for f in fields(Task)}


def task_from_dict(obj: Any) -> Task:
    """A Task from one decoded task line; unknown keys are errors (a typo must not be ignored silently)."""
    if not isinstance(obj, dict):
        raise TaskError(f"a task line must be a JSON object (got {type(obj).__name__})")
    unknown = sorted(set(obj) - _FIELDS)
    if unknown:
        raise TaskError(f"unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}")
    for key in ("id", "prompt"):
        if key not in obj:
            raise TaskError(f"missing {key!r}")
    data = dict(obj)
    for name in ("allow", "deny"):
        if name in data:
            value = data[name]
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list):
                raise TaskError(f"{name} must be a list of rule strings")
            data[name] = tuple(value)
    if "metadata" in data and data["metadata"] is None:
        data["metadata"] = {}
    return Task(**data)


@dataclass(frozen=True)
class BadLine:
    """A task line that was skipped, and why."""

    line: int
    error: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.error}"


def parse_lines(lines: Iterable[str], base: Path | None = None) -> tuple[list[Task], list[BadLine]]:
    """Tasks from JSONL text; bad lines (invalid JSON, bad fields, duplicate ids, a second task working in
    place in the same directory) are returned, not raised. Relative workspaces are resolved against `base`."""
    tasks: list[Task] = []
    bad: list[BadLine] = []
    seen: dict[str, int] = {}
    in_place: dict[Path, int] = {}
    for number, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        try:
            obj = json.loads(text)
        except ValueError as exc:
            bad.append(BadLine(number, f"not valid JSON: {exc}"))
            continue
        try:
            task = task_from_dict(obj)
        except TaskError as exc:
            bad.append(BadLine(number, str(exc)))
            continue
        except TypeError as exc:
            bad.append(BadLine(number, f"bad field: {exc}"))
            continue
        if task.id in seen:
            bad.append(BadLine(number, f"duplicate id {task.id!r} (first on line {seen[task.id]})"))
            continue
        if task.workspace is not None and base is not None and not Path(task.workspace).expanduser().is_absolute():
            task = replace(task, workspace=str(base / task.workspace))
        if task.in_place and task.workspace is not None:
            where = Path(task.workspace).expanduser().resolve()
            if where in in_place:  # two agents editing one directory at once would corrupt each other's work
                bad.append(BadLine(number, f"in_place workspace {where} is already used by line {in_place[where]}"))
                continue
            in_place[where] = number
        seen[task.id] = number
        tasks.append(task)
    return tasks, bad


def load_tasks(path: str | Path) -> tuple[list[Task], list[BadLine]]:
    """`parse_lines` on a file; relative workspaces are resolved against the file's directory."""
    path = Path(path)
    with path.open(encoding="utf-8", errors="replace") as fh:
        return parse_lines(fh, base=path.resolve().parent)


def notify(on_event: Callable[[str, Task, int], None] | None, kind: str, task: Task, attempt: int) -> None:
    """Call the progress callback; whatever it raises is a warning, never the end of the task or the batch."""
    if on_event is None:
        return
    try:
        on_event(kind, task, attempt)
    except BaseException as exc:  # a caller's callback: any exception type
        import warnings

        warnings.warn(
            f"batch on_event raised {type(exc).__name__}: {exc} (task {task.id})", RuntimeWarning, stacklevel=2
        )
