"""Preferences of the terminal UI kept between sessions in `KIMICODE_HOME/ui.json`.

A small JSON file until the real configuration file lands; unreadable or malformed content is ignored
(defaults apply) and writes are atomic, so a crash never leaves a broken file behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

FILE_NAME = "ui.json"


@dataclass
class UISettings:
    """What the UI remembers."""

    show_reasoning: bool = True

    @classmethod
    def load(cls, home: Path) -> UISettings:
        """Read `home/ui.json`; missing, unreadable or invalid values fall back to the defaults."""
        try:
            data: Any = json.loads((home / FILE_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        settings = cls()
        if isinstance(data, dict):
            for f in fields(cls):
                value = data.get(f.name)
                if isinstance(value, type(getattr(settings, f.name))):
                    setattr(settings, f.name, value)
        return settings

    def save(self, home: Path) -> str | None:
        """Write `home/ui.json` atomically; return an error message instead of raising."""
        try:
            home.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".ui-", suffix=".json", dir=home)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(asdict(self), fh, indent=2)
                    fh.write("\n")
                os.replace(tmp, home / FILE_NAME)
            except BaseException:
                _unlink_quietly(tmp)
                raise
        except OSError as exc:
            return f"could not save {home / FILE_NAME}: {exc.strerror or exc}"
        return None


def _unlink_quietly(path: str) -> None:
    """Remove a temporary file, ignoring errors."""
    try:
        os.unlink(path)
    except OSError:
        pass
