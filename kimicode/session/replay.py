"""Rebuild the history a session had, from its log, including pruning and compaction.

The log holds `message` records (appended in order) and the context manager's edits:
`{"type": "prune", "replace": [[index, message], ...]}` puts each message at its index, and
`{"type": "compaction", "start": s, "end": e, "messages": [...]}` replaces `history[s:e]`. Replaying
them gives the exact list the model saw, so a resumed session keeps the same request prefix.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def apply_record(messages: list[dict[str, Any]], record: dict[str, Any]) -> bool:
    """Apply one log record to `messages` in place; False if the record is not a history change
    or does not fit the history (a torn or foreign log)."""
    kind = record.get("type")
    if kind == "message" and isinstance(record.get("message"), dict):
        messages.append(record["message"])
        return True
    if kind == "prune":
        pairs = record.get("replace")
        if not isinstance(pairs, list):
            return False
        valid = [
            (p[0], p[1])
            for p in pairs
            if isinstance(p, list) and len(p) == 2 and isinstance(p[0], int) and isinstance(p[1], dict)
        ]
        if len(valid) != len(pairs) or any(not 0 <= i < len(messages) for i, _ in valid):
            return False
        for i, msg in valid:
            messages[i] = msg
        return True
    if kind == "compaction":
        start, end, new = record.get("start"), record.get("end"), record.get("messages")
        if not (isinstance(start, int) and isinstance(end, int) and isinstance(new, list)):
            return False
        if not 0 <= start <= end <= len(messages) or not all(isinstance(m, dict) for m in new):
            return False
        messages[start:end] = new
        return True
    return False


def replay(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history after all `message`, `prune` and `compaction` records, in order."""
    messages: list[dict[str, Any]] = []
    for record in records:
        apply_record(messages, record)
    return messages
