"""What of a Claude Code setup kimicode found and does not use, each with the reason and the way to get
it: one notice when a session starts, and a section of `kimicode doctor`. Nothing is left out silently.

Used as they are (and so not listed): the permission rules, hooks and `enabledPlugins` of the settings
files, `statusLine`, `~/.claude/CLAUDE.md`, skills, agents, commands and installed plugins. Listed: a rule
or setting kimicode cannot apply, a settings key it has no equivalent for, MCP servers Claude Code keeps in
`~/.claude.json`, and plugins it cannot use.
"""

from __future__ import annotations

from pathlib import Path

from kimicode.config.claude import claude_home, claude_settings_files, read_settings_json

__all__ = ["not_used", "notice"]

USED_KEYS = frozenset({"$schema", "permissions", "hooks", "enabledPlugins", "statusLine"})
"""Keys of Claude Code's settings files kimicode takes."""
REASONS = {
    "env": "kimicode sets no environment variables from a settings file; export them in the shell that starts kimicode",
    "model": "kimicode's model is chosen with --model or [defaults] model in KIMICODE_HOME/config.toml",
    "apiKeyHelper": "kimicode's key comes from `kimicode login` or KIMI_API_KEY",
    "outputStyle": "kimicode has no output styles; write the instructions in AGENTS.md",
    "disableAllHooks": "kimicode has no switch for all hooks; remove the hooks or `kimicode plugin disable` "
    "their plugin",
    "sandbox": "kimicode's own sandbox is set with --sandbox or [sandbox] in config.toml",
    "enableAllProjectMcpServers": "kimicode starts a workspace's .mcp.json servers once you trust it (/trust)",
    "enabledMcpjsonServers": "kimicode starts a workspace's .mcp.json servers once you trust it (/trust)",
    "disabledMcpjsonServers": "set enabled = false in [mcp_servers.NAME] of config.toml instead",
    "extraKnownMarketplaces": "kimicode installs plugins from a folder or git URL: `kimicode plugin add`",
    "additionalDirectories": "kimicode takes them as --add-dir DIR",
}
GENERIC = "a Claude Code setting kimicode has no equivalent for"


def _settings_lines(workspace: Path, trusted: bool) -> list[str]:
    lines: list[str] = []
    from kimicode.permissions.claude import shown_file

    for path, _scope in claude_settings_files(workspace, project=trusted):
        data, _problem = read_settings_json(path)  # a broken file is reported with its rules
        for key in sorted(data or {}):
            if key not in USED_KEYS:
                lines.append(f"{shown_file(path)}: `{key}` not taken: {REASONS.get(key, GENERIC)}")
    return lines


def _claude_json_servers(workspace: Path) -> list[str]:
    """MCP servers in Claude Code's `~/.claude.json` (the user's, and this project's entry there)."""
    configured = claude_home()
    path = configured / ".claude.json" if configured != Path.home() / ".claude" else Path.home() / ".claude.json"
    data, _ = read_settings_json(path)
    if not data:
        return []
    names = list((data.get("mcpServers") or {}) if isinstance(data.get("mcpServers"), dict) else {})
    project = (data.get("projects") or {}).get(str(workspace)) if isinstance(data.get("projects"), dict) else None
    if isinstance(project, dict) and isinstance(project.get("mcpServers"), dict):
        names += list(project["mcpServers"])
    if not names:
        return []
    return [
        f"MCP servers in {path} ({', '.join(sorted(set(names)))}) not taken: kimicode does not read that file "
        "(it holds Claude Code's account data); add them with `kimicode mcp add` or [mcp_servers.NAME] in "
        "config.toml"
    ]


def not_used(workspace: Path, *, trusted: bool) -> list[str]:
    """One line per piece of the Claude Code setup found and not used (see the module doc)."""
    from kimicode.extensions.claudeplugins import claude_plugins
    from kimicode.permissions.claude import claude_rules

    lines = claude_rules(workspace, trusted=trusted).unused
    lines += _settings_lines(workspace, trusted)
    lines += _claude_json_servers(workspace)
    lines += claude_plugins().not_used
    return lines


def notice(workspace: Path, *, trusted: bool) -> str:
    """The start-up notice for `not_used` (empty when everything found is used)."""
    lines = not_used(workspace, trusted=trusted)
    if not lines:
        return ""
    return (
        f"Claude Code setup: {len(lines)} thing(s) found and not used (`kimicode doctor` lists them too):\n"
        + "\n".join(f"  - {line}" for line in lines)
    )
