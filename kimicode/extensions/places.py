"""Where a setup lives: kimicode's own folders, Claude Code's, the project's and the installed plugins'.

User places are always read; project places (the workspace's `.kimicode/` and `.claude/`) only when the
workspace is trusted. Claude Code's user folder is `CLAUDE_CONFIG_DIR` when set, else `~/.claude`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kimicode.config.claude import claude_home
from kimicode.safeio import read_small_text

Scope = Literal["user", "project", "plugin"]
MAX_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Place:
    """A folder that may hold `name` entries (skills/, agents/, commands/), and whose it is."""

    root: Path
    scope: Scope
    plugin: str = ""
    """The plugin's name when it is a plugin's folder (its commands are `/PLUGIN:NAME`)."""
    confine: Path | None = None
    """For a project's folder, the workspace: a file there that is a link to somewhere outside it (a
    repository planting `SKILL.md -> ~/.ssh/id_rsa`) is refused."""

    def admits(self, path: Path) -> bool:
        """True unless `path` resolves outside `confine`."""
        if self.confine is None:
            return True
        root = os.path.realpath(self.confine)
        return os.path.commonpath([root, os.path.realpath(path)]) == root


def folders(
    kind: str, workspace: Path, home: Path, *, trusted: bool, plugins: list[Place] | None = None
) -> list[Place]:
    """The folders holding `kind` (`skills`, `agents`, `commands`), lowest precedence first: plugins',
    Claude Code's user folder, kimicode's user folder, then (trusted only) the project's `.claude/` and
    `.kimicode/`."""
    out = [Place(p.root / kind, "plugin", p.plugin) for p in plugins or ()]
    out += [Place(claude_home() / kind, "user"), Place(home / kind, "user")]
    if trusted:
        out += [
            Place(workspace / ".claude" / kind, "project", confine=workspace),
            Place(workspace / ".kimicode" / kind, "project", confine=workspace),
        ]
    return out


def read_text(path: Path, limit: int = MAX_FILE_BYTES) -> str | None:
    """A small regular file's text (never blocking on a FIFO), or None when it is missing, too big or
    unreadable."""
    return read_small_text(path, limit)


def read_json(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(object, None), (None, None) when the file is absent, or (None, problem)."""
    if not path.exists():
        return None, None
    text = read_text(path)
    if text is None:
        return None, f"{path}: cannot read the file"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"{path}: invalid JSON: {exc}"
    if not isinstance(data, dict):
        return None, f"{path}: expected a JSON object"
    return data, None


def claude_settings_files(workspace: Path, *, trusted: bool) -> list[tuple[Path, Scope]]:
    """Claude Code's settings files kimicode reads hooks from: the user's, and (trusted) the project's
    `.claude/settings.json` and `.claude/settings.local.json`."""
    from kimicode.config.claude import claude_settings_files as files

    return [(path, scope) for path, scope in files(workspace, project=trusted)]
