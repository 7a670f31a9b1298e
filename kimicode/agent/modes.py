"""Telling the model the permission mode, and where kimicode's own notes go: before the user's words.

A real model answers the last thing it reads. A note appended after the prompt (a second user message) was
answered instead of the prompt ("Reply with exactly one word: apple" came back right 0/6 times in
accept-edits and yolo on SmolLM2), and two user messages in a row are refused by strict servers. So the
notes of a turn (the mode note when the mode changed, what SessionStart/UserPromptSubmit hooks add) are put
at the start of the turn's own user message, and the user's words come last (`turn_message`).

The mode a session starts in is said once in kimicode's system prompt, after the per-workspace facts (so the
prefix shared by every session stays the same, and the prompt never changes during the session): a tiny model
still repeats a note that opens the message it answers. A change of mode cannot go there: a system prompt
that changes invalidates the cached prefix of the whole conversation (llama.cpp re-evaluates everything,
hosted servers bill it uncached); the turn's user message is new anyway, so the note in it costs nothing of
the cache. A caller's own `system_prompt` is left as given (the first turn's message carries the note). A mode
changed in the middle of a turn (after a tool call) is told in a user message after the tool results,
never after the user's words. The note is recognised again on resume, so a resumed session is not told
twice.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from kimicode.prompts import NOTES_SEPARATOR

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
_IN_SYSTEM = re.compile(r"^\[permission mode: ([a-z-]+)\] ", re.M)


def mode_text(mode: str) -> str:
    """The one-line note telling the model that the permission mode is now `mode`."""
    return f"[permission mode: {mode}] {MODE_NOTES.get(mode, '')}".rstrip()


def mode_note(mode: str) -> dict[str, Any]:
    """The message telling the model, in the middle of a turn, that the permission mode is now `mode`."""
    return {"role": "user", "content": mode_text(mode)}


def noted_mode(message: Mapping[str, Any]) -> str | None:
    """The mode a message announces (a mid-turn note, or a turn's message that starts with one), else None."""
    content = message.get("content")
    if message.get("role") == "system" and isinstance(content, str):  # the mode a session started in
        found = _IN_SYSTEM.search(content)
        return found.group(1) if found and found.group(1) in MODE_NOTES else None
    if isinstance(content, list):  # a prompt with images: the notes are its first text part
        first = content[0] if content else None
        content = first.get("text") if isinstance(first, Mapping) and first.get("type") == "text" else None
    if message.get("role") != "user" or not isinstance(content, str):
        return None
    found = _NOTE.match(content)
    return found.group(1) if found and found.group(1) in MODE_NOTES else None


def is_mode_note(message: Mapping[str, Any]) -> bool:
    """True for a message that is only a mode note (not a prompt that starts with one)."""
    mode = noted_mode(message)
    return mode is not None and message.get("content") == mode_text(mode)


def note_needed(messages: Sequence[Mapping[str, Any]], mode: str) -> str | None:
    """The note to give now, or None when the model already knows `mode` (a conversation that never
    heard of a mode is in `default`, which needs no note)."""
    told = next((m for m in map(noted_mode, reversed(messages)) if m is not None), "default")
    return None if told == mode or mode not in MODE_NOTES else mode_text(mode)


def turn_message(content: str | list[dict[str, Any]], notes: Sequence[str]) -> dict[str, Any]:
    """The turn's user message: kimicode's `notes` first, each closed by a blank line, then the user's words
    (`content`: the prompt, or its parts with images). `kimicode.prompts.user_words` takes the notes off."""
    if not notes:
        return {"role": "user", "content": content}
    head = "".join(note + NOTES_SEPARATOR for note in notes)
    if isinstance(content, str):
        return {"role": "user", "content": head + content}
    first = content[0] if content else None
    if isinstance(first, dict) and first.get("type") == "text":
        return {"role": "user", "content": [{**first, "text": head + str(first.get("text") or "")}, *content[1:]]}
    return {"role": "user", "content": [{"type": "text", "text": head.rstrip("\n")}, *content]}
