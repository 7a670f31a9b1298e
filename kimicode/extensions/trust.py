"""The trust question: what a workspace would run or add if trusted, and remembering the answer.

A project brings behaviour through `.kimicode/config.toml` (hooks, MCP servers, providers, looser
permissions), `.mcp.json`, Claude Code's `.claude/settings.json` and `.claude/settings.local.json` (hooks,
permission rules), and skills, subagents and commands under `.kimicode/` and `.claude/`. None of it is used
until the user trusts the workspace. The first interactive session in such a workspace asks once; a yes
is stored in `[trust] workspaces` of the user's config.toml (which `is_trusted` reads), a no in
`KIMICODE_HOME/trust.json` so it is not asked again; `/trust` changes either later.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kimicode.config.endpoint import ConfigError
from kimicode.config.trustlist import project_tables, read_trust_list
from kimicode.config.trustseen import record_seen
from kimicode.extensions.places import read_json

DECLINED_FILE = "trust.json"
MAX_LISTED = 8


def _commands_of(hooks: Any) -> list[str]:
    out: list[str] = []
    if isinstance(hooks, list):  # Kimi Code's [[hooks]]
        return [
            f"hook {h.get('event')}: {h['command']}"
            for h in hooks
            if isinstance(h, dict) and isinstance(h.get("command"), str)
        ]
    if isinstance(hooks, dict):
        for event, groups in hooks.items():
            for group in groups if isinstance(groups, list) else ():
                for entry in (group.get("hooks") or []) if isinstance(group, dict) else ():
                    if isinstance(entry, dict) and isinstance(entry.get("command"), str):
                        out.append(f"hook {event}: {entry['command']}")
    return out


def _server_line(name: str, entry: Any) -> str:
    if not isinstance(entry, dict):
        return f"MCP server {name}"
    if entry.get("url"):
        return f"MCP server {name}: {entry['url']}"
    args = entry.get("args") if isinstance(entry.get("args"), list) else []
    return f"MCP server {name}: " + " ".join([str(entry.get("command") or "?"), *map(str, args or [])])


def _folder_items(workspace: Path, kind: str, pattern: str) -> list[str]:
    out: list[str] = []
    for base in (".kimicode", ".claude"):
        folder = workspace / base / kind
        if folder.is_dir():
            out += [f"{kind[:-1]} {base}/{kind}/{p.relative_to(folder)}" for p in sorted(folder.glob(pattern))]
    return out


def project_brings(workspace: Path) -> list[str]:
    """One line per thing the workspace would run or add once trusted (empty: nothing to ask about)."""
    lines: list[str] = []
    data = project_tables(workspace)
    if data:
        lines += [f".kimicode/config.toml {line}" for line in _commands_of(data.get("hooks"))]
        servers = data.get("mcp_servers")
        lines += (
            [_server_line(n, e) + " (.kimicode/config.toml)" for n, e in (servers or {}).items()]
            if isinstance(servers, dict)
            else []
        )
        if isinstance(data.get("providers"), dict):
            lines += [f"provider {n} (.kimicode/config.toml)" for n in data["providers"]]
        notify = data.get("notify")
        command = notify.get("command") if isinstance(notify, dict) else None
        if isinstance(command, list) and command:  # run on every notification: a command like a hook's
            lines.append(f".kimicode/config.toml notify command: {' '.join(map(str, command))}")
        perms = data.get("permissions")
        allow = perms.get("allow") if isinstance(perms, dict) else None
        if isinstance(allow, list) and allow:
            lines.append(f".kimicode/config.toml allows without asking: {', '.join(map(str, allow[:MAX_LISTED]))}")
    mcp, _ = read_json(workspace / ".mcp.json")
    servers = (mcp or {}).get("mcpServers")
    if isinstance(servers, dict):
        lines += [_server_line(n, e) + " (.mcp.json)" for n, e in servers.items()]
    for rel in (".claude/settings.json", ".claude/settings.local.json"):
        claude, _ = read_json(workspace / rel)
        if claude:
            lines += [f"{rel} {line}" for line in _commands_of(claude.get("hooks"))]
            perms = claude.get("permissions")
            allow = perms.get("allow") if isinstance(perms, dict) else None
            if isinstance(allow, list) and allow:
                lines.append(f"{rel} allows without asking: {', '.join(map(str, allow[:MAX_LISTED]))}")
    lines += _folder_items(workspace, "skills", "*/SKILL.md")
    lines += _folder_items(workspace, "agents", "*.md")
    lines += _folder_items(workspace, "commands", "**/*.md")
    return lines


def _declined_path(home: Path) -> Path:
    return home / DECLINED_FILE


def declined(home: Path) -> list[str]:
    data, _ = read_json(_declined_path(home))
    listed = (data or {}).get("declined")
    return [str(x) for x in listed] if isinstance(listed, list) else []


def was_declined(home: Path, workspace: Path) -> bool:
    here = str(workspace.expanduser().resolve())
    return here in declined(home)


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _set_declined(home: Path, workspace: Path, on: bool) -> None:
    here = str(workspace.expanduser().resolve())
    listed = [p for p in declined(home) if p != here] + ([here] if on else [])
    _write_private(_declined_path(home), json.dumps({"declined": listed}, indent=2) + "\n")


def _resolved(entry: str) -> str:
    try:
        return str(Path(entry).expanduser().resolve())
    except (RuntimeError, OSError, ValueError):
        return entry


def set_trusted(home: Path, workspace: Path, trusted: bool) -> Path:
    """Add `workspace` to (or remove it from) `[trust] workspaces` in `home/config.toml`, and record a no
    in trust.json; returns the config file. ConfigError when the file cannot be changed safely."""
    path = home / "config.toml"
    here = str(workspace.expanduser().resolve())
    if path.is_symlink():
        raise ConfigError(f"{path} is a symbolic link; not rewriting it: add the workspace to [trust] yourself")
    trust_list = read_trust_list(path)
    listed = before = trust_list.listed
    if trusted and here not in listed:
        listed = [*listed, here]
    elif not trusted:
        listed = [p for p in listed if _resolved(p) != here]
    if trusted:  # what the user trusts is what is there now (kimicode.config.trustseen)
        record_seen(home, Path(here))
    if listed == before:  # nothing to change in the file (a no, or already listed)
        _set_declined(home, workspace, not trusted)
        return path
    new = trust_list.rewritten(listed)
    if new != trust_list.text:
        _write_private(path, new)
    _set_declined(home, workspace, not trusted)
    return path
