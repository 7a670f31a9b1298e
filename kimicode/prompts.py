"""Load prompt files shipped in `prompts/` (inside the wheel as `kimicode/prompts`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def _prompt_dir() -> Path:
    packaged = _HERE / "prompts"
    if packaged.is_dir():
        return packaged
    return _HERE.parent / "prompts"  # a source checkout or an editable install


@cache
def load_prompt(name: str) -> str:
    """Return the text of `prompts/<name>` (for example `system.md` or `tools/bash.md`)."""
    path = _prompt_dir() / name
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise RuntimeError(f"prompt file missing from the installation: {path}") from None


NOTES_SEPARATOR = "\n\n"
"""Ends each of kimicode's own notes at the start of a turn's user message (see kimicode/agent/modes.py)."""
_MODE_LINE = re.compile(r"\[permission mode: [a-z-]+\] [^\n]*\n\n")
HOOKS_NOTE_START = "[context from hooks]\n"
HOOKS_NOTE_END = "\n[end of context from hooks]"


def hooks_note(context: Sequence[str]) -> str:
    """What SessionStart and UserPromptSubmit hooks added, as one note for the start of the turn's message."""
    return HOOKS_NOTE_START + "\n\n".join(context) + HOOKS_NOTE_END


def user_words(text: str) -> str:
    """`text` without kimicode's notes at its start (a permission-mode line, the hooks' context): what the
    user typed. Session lists, recaps and checkpoints show this."""
    while True:
        if (mode := _MODE_LINE.match(text)) is not None:
            text = text[mode.end() :]
        elif text.startswith(HOOKS_NOTE_START) and HOOKS_NOTE_END + NOTES_SEPARATOR in text:
            text = text.split(HOOKS_NOTE_END + NOTES_SEPARATOR, 1)[1]
        else:
            return text
