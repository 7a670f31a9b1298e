"""Where Claude Code keeps a user's setup, and its settings files as Claude Code reads them.

Claude Code's user folder is `CLAUDE_CONFIG_DIR` when set, else `~/.claude`. Its settings files, lowest
precedence first: the user's `settings.json`, the project's `.claude/settings.json`, then the project's
personal `.claude/settings.local.json`. Lists (permission rules, hooks) are joined across all of them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

SettingsScope = Literal["user", "project"]

__all__ = ["SettingsScope", "claude_home", "claude_settings_files", "read_settings_json"]


def claude_home() -> Path:
    """Claude Code's user folder (`CLAUDE_CONFIG_DIR`, else `~/.claude`)."""
    configured = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".claude"


def claude_settings_files(workspace: Path, *, project: bool = True) -> list[tuple[Path, SettingsScope]]:
    """Claude Code's settings files, lowest precedence first: the user's, then (with `project`) the
    workspace's `.claude/settings.json` and `.claude/settings.local.json`."""
    out: list[tuple[Path, SettingsScope]] = [(claude_home() / "settings.json", "user")]
    if project:
        out += [
            (workspace / ".claude" / "settings.json", "project"),
            (workspace / ".claude" / "settings.local.json", "project"),
        ]
    return out


def read_settings_json(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(object, None), (None, None) when the file is absent, or (None, problem naming the file)."""
    from kimicode.safeio import read_small_text

    if not path.exists():
        return None, None
    text = read_small_text(path, 1024 * 1024)
    if text is None:
        return None, f"{path}: cannot read the file"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"{path}: invalid JSON: {exc}"
    if not isinstance(data, dict):
        return None, f"{path}: expected a JSON object"
    return data, None
