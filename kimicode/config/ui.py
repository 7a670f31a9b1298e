"""Preferences of the terminal UI, kept in the user's `KIMICODE_HOME/config.toml` under `[ui]`.

`[ui] reasoning = "show" | "hide"` is read with the rest of the configuration; `/reasoning show|hide`
saves it by editing that one line (or adding it), leaving every other line, comment and the file's mode
as they were. Older versions kept the preference in `KIMICODE_HOME/ui.json`: it is still read when
config.toml does not say, and removed once the preference has been saved to config.toml. An unreadable
or malformed file never stops the UI (defaults apply), and a file kimicode cannot edit safely is left
untouched, with a message saying what to set by hand.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimicode.safeio import private_dirs

CONFIG_NAME = "config.toml"
LEGACY_NAME = "ui.json"
_TABLE = re.compile(r"^\s*\[\s*ui\s*\]\s*(#.*)?$")
_ANY_TABLE = re.compile(r"^\s*\[")
_REASONING = re.compile(r"^\s*reasoning\s*=")


@dataclass
class UISettings:
    """What the UI remembers between sessions."""

    show_reasoning: bool = True

    @classmethod
    def load(cls, home: Path) -> UISettings:
        """`[ui]` of `home/config.toml`, else the legacy `home/ui.json`, else the defaults."""
        ui = _read_toml(home / CONFIG_NAME).get("ui")
        if isinstance(ui, dict) and ui.get("reasoning") in ("show", "hide"):
            return cls(show_reasoning=ui["reasoning"] == "show")
        try:
            legacy: Any = json.loads((home / LEGACY_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        value = legacy.get("show_reasoning") if isinstance(legacy, dict) else None
        return cls(show_reasoning=value) if isinstance(value, bool) else cls()

    def save(self, home: Path) -> str | None:
        """Write `[ui] reasoning` into `home/config.toml`; return an error message instead of raising."""
        path = home / CONFIG_NAME
        try:
            target = Path(os.path.realpath(path))  # a config.toml linked from a dotfiles repository stays linked
            old = target.read_bytes().decode("utf-8") if target.exists() else ""  # line endings as they are
        except (OSError, UnicodeDecodeError) as exc:
            return f"could not read {path}: {getattr(exc, 'strerror', None) or exc}"
        value = "show" if self.show_reasoning else "hide"
        new = _with_reasoning(old, value)
        if new is None or (_parse(new).get("ui") or {}).get("reasoning") != value:
            return (
                f"could not save the preference: {path} is not valid TOML or defines [ui] in a form kimicode "
                f'does not edit; add reasoning = "{value}" under [ui] yourself'
            )
        try:
            private_dirs(home)
            _write_atomic(target, new)
        except OSError as exc:
            return f"could not save {path}: {exc.strerror or exc}"
        with contextlib.suppress(OSError):
            (home / LEGACY_NAME).unlink()
        return None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return _parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return {}


def _parse(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}


def _with_reasoning(text: str, value: str) -> str | None:
    """`text` with `reasoning = "value"` in its `[ui]` table (changed in place, or added); None when the
    file does not parse (it is never rewritten then)."""
    if text.strip():
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return None
    line = f'reasoning = "{value}"'
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if _TABLE.match(ln)), None)
    if start is None:
        sep = "" if not text or text.endswith("\n") else "\n"
        gap = "\n" if text.strip() else ""
        return f"{text}{sep}{gap}[ui]\n{line}\n"
    end = next((i for i in range(start + 1, len(lines)) if _ANY_TABLE.match(lines[i])), len(lines))
    for i in range(start + 1, end):
        if _REASONING.match(lines[i]):
            eol = "\r\n" if lines[i].endswith("\r\n") else "\n"
            lines[i] = line + eol
            return "".join(lines)
    header = lines[start]
    if not header.endswith("\n"):
        lines[start] = header + "\n"
    lines.insert(start + 1, line + "\n")
    return "".join(lines)


def _write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` through a temporary file in the same directory, keeping its mode
    (config.toml may hold the key with mode 0600)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = 0o600
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
