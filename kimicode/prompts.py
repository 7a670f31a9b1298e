"""Load prompt files shipped in `prompts/` (inside the wheel as `kimicode/prompts`)."""

from __future__ import annotations

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
