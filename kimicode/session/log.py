"""The append-only session log: one JSON object per line, written as each message is committed.

A record is flushed as soon as it is written and the file is fsynced at the end of each turn, so a
crash loses at most a torn last line, which `load` ignores. The API key is never part of a record.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

SCHEMA_VERSION = 1
INTERRUPTED = "interrupted by user"


def new_session_id() -> str:
    """Sortable, unique: UTC timestamp plus random suffix (also used as the prompt cache key)."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


class SessionLog:
    """Appends records to `<home>/sessions/<id>.jsonl`."""

    def __init__(self, directory: Path, session_id: str) -> None:
        self.session_id = session_id
        self.directory = directory
        self.path = directory / f"{session_id}.jsonl"
        self._fh: IO[str] | None = None

    @property
    def spill_dir(self) -> Path:
        """Where full copies of capped tool outputs go (readable by the model with read_file)."""
        return self.directory / self.session_id

    def _open(self) -> IO[str]:
        if self._fh is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the session
        return self._fh

    def append(self, record: dict[str, Any]) -> None:
        """Write one record and flush it to the OS."""
        fh = self._open()
        line = json.dumps({"v": SCHEMA_VERSION, "ts": round(time.time(), 3), **record}, ensure_ascii=False)
        fh.write(line + "\n")
        fh.flush()

    def message(self, message: dict[str, Any]) -> None:
        """Record a committed message exactly as it is sent to the model."""
        self.append({"type": "message", "message": message})

    def sync(self) -> None:
        """fsync: called at the end of each turn."""
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self.sync()
            self._fh.close()
            self._fh = None


@dataclass
class LoadedSession:
    """What `load` recovers: records and a valid message history."""

    session_id: str
    records: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    repaired: int
    """How many synthetic tool results were added for calls that never got one."""


def iter_records(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a log, skipping a torn or corrupt line instead of failing."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                yield rec


def repair_history(messages: list[dict[str, Any]]) -> int:
    """Give every tool call without a result a synthetic `interrupted` result, in place; return count."""
    fixed: list[dict[str, Any]] = []
    added = 0
    pending: list[str] = []

    def flush() -> None:
        nonlocal added
        for call_id in pending:
            fixed.append({"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED})
            added += 1
        pending.clear()

    for msg in messages:
        role = msg.get("role")
        if role == "tool":
            if msg.get("tool_call_id") in pending:
                pending.remove(msg["tool_call_id"])
                fixed.append(msg)
            continue  # orphan tool results (no matching call) would be rejected by the server
        flush()
        fixed.append(msg)
        if role == "assistant":
            pending = [tc.get("id", "") for tc in msg.get("tool_calls") or ()]
    flush()
    messages[:] = fixed
    return added


def load(path: Path) -> LoadedSession:
    """Read a session log back into a valid history (for resume)."""
    records = list(iter_records(path))
    messages = [r["message"] for r in records if r.get("type") == "message" and isinstance(r.get("message"), dict)]
    repaired = repair_history(messages)
    return LoadedSession(path.stem, records, messages, repaired)
