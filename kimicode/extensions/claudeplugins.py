"""Plugins installed by Claude Code, used as they are: `~/.claude/plugins/installed_plugins.json` says
where each one is (`installPath`), and `enabledPlugins` in Claude Code's user settings says which are on.

An enabled one applies like a plugin `kimicode plugin add` installed (its commands, skills, agents, hooks
and MCP servers), from Claude Code's own copy; kimicode never changes Claude Code's files. A plugin of the
same name installed in kimicode wins. What is found and not used (a disabled plugin, one installed for a
project only, a missing folder) is said by `not_used` for the start-up notice and `doctor`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimicode.config.claude import claude_home, read_settings_json
from kimicode.extensions.plugins import Plugin, PluginError, enabled_plugins, read_plugin

__all__ = ["ClaudePlugins", "claude_plugins", "plugins_in_use"]

INSTALLED = Path("plugins") / "installed_plugins.json"


@dataclass
class ClaudePlugins:
    """Claude Code's installed plugins: each as a `Plugin` (`enabled` from `enabledPlugins`), and what
    cannot be used, with the reason."""

    plugins: list[Plugin] = field(default_factory=list)
    not_used: list[str] = field(default_factory=list)


def _entries(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(`name@marketplace`, entry) from version 1 (one object per plugin) or 2 (a list per plugin) files."""
    plugins = data.get("plugins")
    out: list[tuple[str, dict[str, Any]]] = []
    if not isinstance(plugins, dict):
        return out
    for key, value in plugins.items():
        for entry in value if isinstance(value, list) else [value]:
            if isinstance(entry, dict):
                out.append((str(key), entry))
    return out


def claude_plugins() -> ClaudePlugins:
    """Claude Code's installed plugins (see the module doc); empty when Claude Code has none."""
    found = ClaudePlugins()
    root = claude_home()
    index = root / INSTALLED
    if not index.exists():
        return found
    data, problem = read_settings_json(index)
    if problem or data is None:
        found.not_used.append(f"Claude Code's plugins: {problem}")
        return found
    settings, _ = read_settings_json(root / "settings.json")
    enabled = (settings or {}).get("enabledPlugins")
    enabled = enabled if isinstance(enabled, dict) else {}
    for key, entry in _entries(data):
        name = key.split("@", 1)[0]
        where = entry.get("installPath")
        scope = entry.get("scope", "user")
        if scope not in ("user", None):
            found.not_used.append(
                f"Claude Code plugin {key}: installed for a project ({entry.get('projectPath')}), "
                "not for you; `kimicode plugin add PATH` in that project's setup to use it"
            )
            continue
        if not isinstance(where, str) or not Path(where).is_dir():
            found.not_used.append(
                f"Claude Code plugin {key}: its folder {where!r} is missing; reinstall it in "
                "Claude Code, or `kimicode plugin add` its source"
            )
            continue
        try:
            plugin = read_plugin(Path(where), name=name)
        except PluginError as exc:
            found.not_used.append(f"Claude Code plugin {key}: {exc}")
            continue
        plugin.enabled = enabled.get(key) is True
        plugin.source = f"Claude Code ({key})"
        found.plugins.append(plugin)
    return found


def plugins_in_use(home: Path) -> list[Plugin]:
    """The plugins a session uses: kimicode's enabled ones, then Claude Code's enabled ones whose name
    kimicode has no plugin of (cheap when neither has any)."""
    mine = enabled_plugins(home)
    names = {p.name for p in mine}
    return mine + [p for p in claude_plugins().plugins if p.enabled and p.name not in names]
