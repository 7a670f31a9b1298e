"""What calibration learnt, kept per endpoint and model across processes, and dropped when the server changes.

The token estimate is corrected by the server's own counts (`accounting.TokenAccountant`): a factor, and
whether the chat template renders the tool definitions at all. Learning that again in every process made an
8k llama.cpp session compact every turn until its first answer arrived. The state is kept in two places:
the session log (a `calibration` record, read back on resume, `-c` and fork) and
`KIMICODE_HOME/cache/calibration.json` per endpoint and model (a new session on the same server starts
calibrated). Each copy carries the server's fingerprint (its model file, window and build, as discovery
reported them); a copy made against another fingerprint is not used.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kimicode.safeio import private_dirs, private_write

MAX_AGE = 30 * 24 * 3600.0
"""A stored calibration older than this is not used."""


def _path(home: Path) -> Path:
    return home / "cache" / "calibration.json"


def _read(home: Path) -> dict[str, Any]:
    try:
        data = json.loads(_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load(home: Path, base_url: str, model: str, fingerprint: str) -> dict[str, Any] | None:
    """The calibration stored for this endpoint and model, if it was learnt against `fingerprint`."""
    entry = _read(home).get(f"{base_url.rstrip('/')}|{model}")
    if not isinstance(entry, dict) or entry.get("fingerprint") != fingerprint:
        return None
    at = entry.get("at")
    if not isinstance(at, int | float) or not 0 <= time.time() - at < MAX_AGE:
        return None
    return entry


def save(home: Path, base_url: str, model: str, state: Mapping[str, Any]) -> None:
    """Store `state` (numbers and the fingerprint only: no key, no prompt) for this endpoint and model."""
    path = _path(home)
    data = _read(home)
    data[f"{base_url.rstrip('/')}|{model}"] = {**state, "at": time.time()}
    if len(data) > 200:  # keep the newest: one entry per endpoint and model ever used would grow forever
        newest = sorted(data.items(), key=lambda kv: kv[1].get("at", 0) if isinstance(kv[1], dict) else 0)
        data = dict(newest[-200:])
    try:
        private_dirs(path.parent)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
        private_write(tmp, json.dumps(data, indent=1, sort_keys=True))  # 0600 like everything in KIMICODE_HOME
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: calibration is learnt again next time


def from_records(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last `calibration` record of a session log, if any."""
    found = None
    for rec in records:
        if rec.get("type") == "calibration":
            found = rec
    return found


__all__ = ["from_records", "load", "save"]
