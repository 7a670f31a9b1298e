"""Telling the model the permission mode: a short note in the history whenever the mode it last heard of
differs from the current one.

The note is an ordinary user message appended to the history (never a change to the system prompt), so
the cached prefix of the conversation stays valid. It is recognised again on resume, so a resumed
session is not told twice.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

MODE_NOTES = {
    "default": "file edits and commands that change things ask the user first.",
    "accept-edits": "file edits inside the workspace run without asking; other commands still ask.",
    "plan": (
        "nothing may be changed: read and investigate only (edits are refused, commands that change things "
        "too). End your answer with a concrete, numbered plan; the user approves it, then you carry it out."
    ),
    "yolo": "every action runs without asking the user.",
}
"""What each mode means for the model."""

_NOTE = re.compile(r"^\[permission mode: ([a-z-]+)\] ")


def mode_note(mode: str) -> dict[str, Any]:
    """The message telling the model that the permission mode is now `mode`."""
    return {"role": "user", "content": f"[permission mode: {mode}] {MODE_NOTES.get(mode, '')}".rstrip()}


def noted_mode(message: Mapping[str, Any]) -> str | None:
    """The mode a message made by `mode_note` announces, else None."""
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, str):
        return None
    found = _NOTE.match(content)
    return found.group(1) if found and found.group(1) in MODE_NOTES else None


def note_needed(messages: Sequence[Mapping[str, Any]], mode: str) -> dict[str, Any] | None:
    """The note to append now, or None when the model already knows `mode` (a conversation that never
    heard of a mode is in `default`, which needs no note)."""
    told = next((m for m in map(noted_mode, reversed(messages)) if m is not None), "default")
    return None if told == mode or mode not in MODE_NOTES else mode_note(mode)
