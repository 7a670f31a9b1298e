"""Live progress for `kimicode batch`: a rich bar on a terminal, plain lines otherwise, or stream-json."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import IO, Any

from kimicode.batch.results import TaskResult
from kimicode.batch.tasks import Task


class Progress:
    """Counts done / running / failed / retried, tokens and cost, and shows them as tasks come and go."""

    def __init__(self, total: int, *, fmt: str, out: IO[str], err: IO[str], skipped: int = 0) -> None:
        self.total = total
        self.fmt = fmt
        self.out = out
        self.err = err
        self.skipped = skipped
        self.done = self.failed = self.retried = 0
        self.running: set[str] = set()
        self.tokens = 0
        self.cost = 0.0
        self.priced = False
        self.start = time.monotonic()
        self._bar: Any = None
        self._task_id: Any = None
        self._echo: Callable[[], None] = lambda: None

    def __enter__(self) -> Progress:
        if self.fmt == "text" and self.err.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(
                TextColumn("batch"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=Console(file=self.err),
                transient=False,
            )
            self._echo = quiet_control_echo(self.err)
            self._bar.__enter__()
            self._task_id = self._bar.add_task(self.counts(), total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._echo()

    def counts(self) -> str:
        cost = f" · ${self.cost:.4f}" if self.priced else ""
        return (
            f"done {self.done} · running {len(self.running)} · failed {self.failed} · retried {self.retried}"
            f" · {self.tokens / 1000:.1f}k tokens{cost}"
        )

    def event(self, kind: str, task: Task, attempt: int) -> None:
        """Called by the engine when a task starts or is retried."""
        self.running.add(task.id)
        if kind == "retrying":
            self.retried += 1
        if self.fmt == "stream-json":
            self._line({"type": "task_started", "id": task.id, "attempt": attempt})
        self._refresh()

    def result(self, result: TaskResult) -> None:
        self.running.discard(result.id)
        self.done += 1
        if not result.ok:
            self.failed += 1
        self.tokens += result.usage.get("prompt_tokens", 0) + result.usage.get("completion_tokens", 0)
        if result.cost_usd is not None:
            self.cost += result.cost_usd
            self.priced = True
        if self.fmt == "stream-json":
            self._line({"type": "task_result", **json.loads(result.to_json())})
        elif self._bar is None:
            tail = f": {result.error.splitlines()[0]}" if result.error else ""
            self.err.write(f"kimicode: [{self.done}/{self.total}] {result.id} {result.status}{tail}\n")
            self.err.flush()
        if self._bar is not None:
            self._bar.advance(self._task_id)
        self._refresh()

    def note(self, kind: str, **fields: Any) -> None:
        """A message outside the task flow (a bad line, the resume hint): stream-json line or stderr."""
        if self.fmt == "stream-json":
            self._line({"type": kind, **fields})
        else:
            self.err.write(f"kimicode: {fields.get('message', kind)}\n")
            self.err.flush()

    def _refresh(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task_id, description=self.counts())

    def _line(self, obj: dict[str, Any]) -> None:
        self.out.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.out.flush()


def quiet_control_echo(stream: IO[str]) -> Callable[[], None]:
    """Stop the terminal echoing `^C` while the bar is live; returns what puts the setting back.

    The echoed `^C` lands on the bar's line and can wrap it, so rich's redraw (cursor up one line per row
    it drew) leaves the old bar above the new one: the bar showed twice after Ctrl-C.
    """
    try:
        import termios

        fd = stream.fileno()
        saved = termios.tcgetattr(fd)
    except (ImportError, OSError, ValueError, AttributeError):
        return lambda: None
    quiet = list(saved)
    quiet[3] = saved[3] & ~termios.ECHOCTL
    try:
        termios.tcsetattr(fd, termios.TCSANOW, quiet)
    except OSError:
        return lambda: None

    def restore() -> None:
        try:
            termios.tcsetattr(fd, termios.TCSANOW, saved)
        except OSError:
            pass

    return restore
