"""A trust decision covers what it saw: the project files trust lets run, fingerprinted when trusted.

When the user trusts a workspace (the question, `/trust on`, or a session that starts trusted and has no
record yet), kimicode stores a SHA-256 of every file there that trust lets run: `.kimicode/`'s config,
hooks, skills, agents, commands and plugins, everything below `.claude/`, `.agents/` and `.claude-plugin/`,
`.mcp.json` and `hooks/hooks.json`. It is kept in `KIMICODE_HOME/trust-seen.json` (0600), one entry per
workspace. A later session in a workspace listed in `[trust] workspaces` whose files differ is not trusted
for that run: one notice names what is new, changed or gone, and the terminal asks again (showing it)
before the session. `--trust-workspace` trusts the run anyway, says what changed, and records the new state.
A workspace trusted before this record existed gets its first record at its next trusted session.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["TRUST_PLACES", "changes", "fingerprint", "record_seen", "review", "seen_changes"]

TRUST_PLACES = (
    ".kimicode/config.toml",
    ".kimicode/hooks",
    ".kimicode/skills",
    ".kimicode/agents",
    ".kimicode/commands",
    ".kimicode/plugins",
    ".claude",
    ".agents",
    ".claude-plugin",
    ".mcp.json",
    "hooks/hooks.json",
)
"""Below the workspace: the files whose content trust lets run or load (hooks, MCP servers, settings,
skills, agents, commands, plugins)."""
SEEN_FILE = "trust-seen.json"
MAX_FILES = 2000
MAX_BYTES = 4 << 20


def _digest(path: Path) -> str:
    """A file's SHA-256 (a link: of its target's text; a file larger than MAX_BYTES: of its size and mtime)."""
    try:
        if path.is_symlink():
            return "link:" + os.readlink(path)
        st = path.stat()
        if st.st_size > MAX_BYTES:
            return f"large:{st.st_size}:{st.st_mtime_ns}"
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        return f"unreadable:{exc.errno}"


def fingerprint(workspace: Path) -> dict[str, str]:
    """Every file of `TRUST_PLACES` below `workspace` (relative path -> digest); at most MAX_FILES."""
    out: dict[str, str] = {}
    for rel in TRUST_PLACES:
        top = workspace / rel
        if top.is_symlink() or top.is_file():
            out[rel] = _digest(top)
            continue
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                if len(out) >= MAX_FILES:
                    return out
                path = Path(dirpath) / name
                out[path.relative_to(workspace).as_posix()] = _digest(path)
    return out


def changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """What differs, one line per file: `X (new)`, `X (changed)`, `X (removed)`."""
    lines = [f"{p} (new)" if p not in old else f"{p} (changed)" for p in sorted(new) if old.get(p) != new[p]]
    return lines + [f"{p} (removed)" for p in sorted(old) if p not in new]


def _load(home: Path) -> dict[str, Any]:
    try:
        with open(home / SEEN_FILE, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _key(workspace: Path) -> str:
    return str(workspace.expanduser().resolve())


def seen_changes(home: Path, workspace: Path) -> list[str] | None:
    """What changed since the workspace was trusted; None when nothing was recorded."""
    old = _load(home).get(_key(workspace))
    if not isinstance(old, dict):
        return None
    return changes({str(k): str(v) for k, v in old.items()}, fingerprint(workspace))


def record_seen(home: Path, workspace: Path) -> None:
    """Remember the workspace's files as the user trusted them (KIMICODE_HOME/trust-seen.json, 0600)."""
    data = _load(home)
    data[_key(workspace)] = fingerprint(workspace)
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = home / SEEN_FILE
    tmp = path.with_name(f".{SEEN_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def review(home: Path, workspace: Path, *, flag: bool) -> tuple[bool, str | None]:
    """For a workspace that starts trusted (listed, or `flag`: --trust-workspace): whether it stays trusted
    this run, and the notice saying what changed since it was trusted (see the module doc)."""
    try:
        changed = seen_changes(home, workspace)
        if changed is None or (changed and flag):
            record_seen(home, workspace)
    except OSError:
        changed = None  # no record can be kept: trust stays as the user's list says
    if not changed:
        return True, None
    shown = ", ".join(changed[:12]) + (f" and {len(changed) - 12} more" if len(changed) > 12 else "")
    if flag:
        return True, (
            f"{workspace}: trusted for this run (--trust-workspace); changed since it was last trusted: {shown}"
        )
    return False, (
        f"{workspace}: what this trusted workspace brings changed since you trusted it: {shown}. Its "
        "hooks, MCP servers, settings, skills and plugins are not used this run; to trust it again, "
        "answer the question at the next interactive start, use /trust on, or run with "
        "--trust-workspace"
    )
