"""Result lines: `TaskResult`, writing RESULTS.jsonl, and reading it back to resume a batch."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

RERUN_STATUSES = frozenset({"interrupted"})
"""Statuses that do not count as finished: a re-run runs those tasks again."""
FAILED_STATUSES = frozenset({"error", "timeout", "budget", "max_turns", "crashed"})


@dataclass
class TaskResult:
    """The outcome of one task: one line of RESULTS.jsonl."""

    id: str
    status: str
    """success, error, max_turns, timeout, budget, crashed (gave up after retries), interrupted."""
    result: str = ""
    error: str | None = None
    error_kind: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    cost_usd: float | None = None
    duration_ms: int = 0
    num_turns: int = 0
    changed_files: list[str] = field(default_factory=list)
    diff: str | None = None
    session_id: str | None = None
    session_log: str | None = None
    workspace: str | None = None
    attempts: int = 1
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "success"

    def to_json(self) -> str:
        data = asdict(self)
        if data["diff"] is None:
            del data["diff"]
        if not data["metadata"]:
            del data["metadata"]
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> TaskResult:
        known = {k: v for k, v in obj.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def read_results(path: str | Path) -> tuple[dict[str, TaskResult], int]:
    """The last result per id in RESULTS.jsonl, and how many lines could not be read (e.g. cut by a kill)."""
    results: dict[str, TaskResult] = {}
    unreadable = 0
    path = Path(path)
    if not path.exists():
        return results, 0
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                result = TaskResult.from_dict(obj)
            except (ValueError, TypeError):
                unreadable += 1
                continue
            if isinstance(result.id, str) and isinstance(result.status, str):
                results[result.id] = result
            else:
                unreadable += 1
    return results, unreadable


def finished_ids(results: dict[str, TaskResult], *, retry_failed: bool = False) -> set[str]:
    """Ids a re-run skips: every recorded result except interrupted ones (and failed ones when asked)."""
    skip = RERUN_STATUSES | (FAILED_STATUSES if retry_failed else frozenset())
    return {rid for rid, r in results.items() if r.status not in skip}


class ResultWriter:
    """Appends one line per result and flushes it to disk at once (a kill loses at most the line being written)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = self.path.open("a", encoding="utf-8")
        if self._fh.tell() > 0:  # a previous run cut mid-line must not glue two results together
            with self.path.open("rb") as fh:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    self._fh.write("\n")

    def write(self, result: TaskResult) -> None:
        self._fh.write(result.to_json() + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()
