"""Claude Code's permission rules, read as Claude Code reads them, into kimicode's one rule engine.

Files (lists joined, as Claude Code joins them): `~/.claude/settings.json` (`CLAUDE_CONFIG_DIR`), the
workspace's `.claude/settings.json` and `.claude/settings.local.json`, each's `permissions.allow`, `ask`
and `deny`. The engine applies them with kimicode's own rules: deny first, then ask, then the mode and the
allow rules, so plan mode, the sandbox and hooks keep their order. An untrusted workspace's allow rules are
ignored (a cloned repository must not grant itself permissions); its deny and ask rules only restrict, so
they apply.

Claude Code's rule syntax (code.claude.com/docs/en/permissions):

- `Bash`, `Bash(*)`: every command; `Bash(npm run test)`: exactly that command; `Bash(npm run test:*)` and
  `Bash(npm run test *)`: that command alone or followed by arguments (a whole-word prefix: not
  `npm run testx`); any other `*` is any text (`Bash(git * main)`). A rule is matched against each simple
  command of a compound line (`a && b`), so `Bash(safe *)` never admits `safe && rm -rf x`.
- `Read(...)`, `Edit(...)`, `Write(...)` (and `Glob`, `Grep`, `LS` as `Read`, `MultiEdit`, `NotebookEdit`
  as `Edit`): gitignore-style paths. `//path` is absolute, `~/path` is below the home folder, `/path` and
  `./path` are relative to the project (the workspace), and a bare name with no `/` (`.env`, `*.pem`)
  matches at any depth below the workspace. `*` stays within one folder, `**` spans folders.
- `WebFetch(domain:example.com)`: fetches from that host (and below it).
- `mcp__server`, `mcp__server__*`: every tool of that MCP server; `mcp__server__tool`: one tool.

A rule kimicode cannot apply (`Skill(name)`, `Agent(name)`, a tool kimicode lacks) is never silently
dropped: it is returned in `ClaudeRules.unused` with the reason, for the start-up notice and `doctor`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from kimicode.config.claude import claude_settings_files, read_settings_json
from kimicode.config.endpoint import ConfigError
from kimicode.permissions.policy import Rule, Rules, parse_rule

__all__ = ["ClaudeRules", "call_matches", "claude_rules", "parse_claude_rule", "shown_file"]

_PATH_TOOLS = frozenset({"Read", "Edit", "Write", "MultiEdit", "NotebookEdit", "Glob", "Grep", "LS"})
_PLAIN_TOOLS = {
    "Agent": "task",
    "Task": "task",
    "Skill": "skill",
    "TodoWrite": "todo_write",
    "WebSearch": "web_search",
    "WebFetch": "web_fetch",
    "Bash": "bash",
}
"""Claude Code's tools that take no pattern kimicode can apply, as kimicode's tool."""
_NOT_TAKEN = {
    "Agent": "kimicode's rules name the task tool, not one subagent; write `Agent` or `Task` for all of them",
    "Task": "kimicode's rules name the task tool, not one subagent; write `Task` for all of them",
    "Skill": "kimicode's rules name the skill tool, not one skill; write `Skill` for all of them",
    "SlashCommand": "kimicode's slash commands are typed by you, not run by the model",
}
_TOOL_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_-]*(?:__\*)?)\s*(?:\((.*)\))?\s*", re.DOTALL)
_KIMICODE_TOOLS = frozenset(
    {
        "bash",
        "read",
        "edit",
        "read_file",
        "write_file",
        "edit_file",
        "apply_patch",
        "glob",
        "grep",
        "web_fetch",
        "web_search",
        "task",
        "todo_write",
        "skill",
    }
)
ACTIONS = ("allow", "deny", "ask")
_OTHER_KEYS = {
    "defaultMode": "kimicode's mode is set by --permission-mode or [defaults] permission_mode in config.toml",
    "additionalDirectories": "kimicode takes them as --add-dir DIR",
    "disableBypassPermissionsMode": "kimicode has no managed settings; leave --yolo unused",
}


@dataclass
class ClaudeRules:
    """The rules of Claude Code's settings files, and what was found and not used."""

    rules: Rules = field(default_factory=Rules)
    ignored: list[str] = field(default_factory=list)
    """An untrusted workspace's allow rules, skipped (one notice per file)."""
    unused: list[str] = field(default_factory=list)
    """Each rule or setting kimicode cannot apply, with the file, the reason and the way to get it."""
    files: list[Path] = field(default_factory=list)
    """The settings files that had a `permissions` table."""


def shown_file(path: Path) -> str:
    """A file as messages name it (`~/...` below the home folder)."""
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home) :] if text.startswith(home.rstrip("/") + "/") else text


def parse_claude_rule(text: str, source: str = "") -> Rule:
    """One rule of a Claude Code settings file as a kimicode `Rule` (see the module doc for the syntax).
    Raises ConfigError, with the reason, for a rule kimicode cannot apply."""
    where = f"{source}: " if source else ""
    tool, spec = _split(text, where)
    if tool.startswith("mcp__"):
        if spec:
            raise ConfigError(f"{where}`{text}`: an MCP rule takes no specifier (mcp__server or mcp__server__tool)")
        return Rule(tool, None, text.strip(), source)
    if tool in _NOT_TAKEN and spec is not None:
        raise ConfigError(f"{where}`{text}`: {_NOT_TAKEN[tool]}")
    if tool == "Bash" and spec is not None:
        return _bash_rule(text, spec, source)
    if tool in _PATH_TOOLS:
        inner = f"{tool}({_claude_path(spec)})" if spec is not None else tool
        return replace(parse_rule(inner, source), raw=text.strip())
    if tool in _PLAIN_TOOLS and spec is None:
        return Rule(_PLAIN_TOOLS[tool], None, text.strip(), source)
    if tool == "WebFetch" or tool in _KIMICODE_TOOLS:
        return replace(parse_rule(text, source), raw=text.strip())
    raise ConfigError(
        f"{where}`{text}`: kimicode has no tool {tool!r} (its tools: bash, read_file, write_file, "
        "edit_file, apply_patch, glob, grep, web_fetch, task, skill, mcp__SERVER__TOOL)"
    )


def _split(text: str, where: str) -> tuple[str, str | None]:
    """(tool, specifier or None for the whole tool: `Bash`, `Bash()`, `Bash(*)`, `Read(**)`)."""
    m = _TOOL_NAME.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise ConfigError(f"{where}{text!r} is not a rule of Claude Code's syntax (Tool or Tool(specifier))")
    tool, spec = m.group(1), m.group(2)
    spec = spec.strip() if spec is not None else None
    if spec in ("", "*") or (spec == "**" and tool in _PATH_TOOLS):
        return tool, None
    return tool, spec


def _bash_rule(text: str, spec: str, source: str) -> Rule:
    """`Bash(cmd:*)` and `Bash(cmd *)` (the trailing wildcard optional) are whole-word prefixes; any other
    `*` is any text."""
    words = " ".join(spec.split())
    if words.endswith(":*") or (words.endswith(" *") and "*" not in words[:-2]):
        prefix = words[:-2].rstrip()
        if prefix and "*" not in prefix:
            return Rule("bash", prefix, text.strip(), source, word_prefix=True)
    return replace(parse_rule(f"Bash({words})", source), raw=text.strip())


def _claude_path(spec: str) -> str:
    """Claude Code's gitignore-style path as kimicode's pattern: `//abs` absolute, `~/x` home, `/x` and
    `./x` workspace-relative, a name without `/` at any depth below the workspace."""
    if spec.startswith("//"):
        return spec[1:]
    if spec == "~" or spec.startswith("~/"):
        return spec
    if spec.startswith("/"):
        return spec.lstrip("/") or "."
    if spec.startswith("./"):
        return spec[2:].lstrip("/") or "."
    if "/" not in spec.rstrip("/"):
        return "**/" + spec.rstrip("/")
    return spec


def claude_rules(workspace: Path, *, trusted: bool) -> ClaudeRules:
    """The rules of Claude Code's settings files for a session in `workspace` (see the module doc)."""
    out = ClaudeRules()
    lists: dict[str, list[Rule]] = {a: [] for a in ACTIONS}
    for path, scope in claude_settings_files(workspace):
        data, problem = read_settings_json(path)
        if problem:
            out.unused.append(f"{shown_file(path)}: not read: {problem.split(': ', 1)[-1]}")
            continue
        perms = (data or {}).get("permissions")
        if not isinstance(perms, dict):
            continue
        out.files.append(path)
        _read_table(perms, path, scope == "project" and not trusted, lists, out)
    out.rules = Rules(tuple(lists["allow"]), tuple(lists["deny"]), tuple(lists["ask"]))
    return out


def _read_table(
    perms: dict[str, object], path: Path, untrusted: bool, lists: dict[str, list[Rule]], out: ClaudeRules
) -> None:
    shown = shown_file(path)
    for action in ACTIONS:
        texts = perms.get(action) or []
        if not isinstance(texts, list):
            out.unused.append(f"{shown}: permissions.{action} is not a list; not used")
            continue
        if action == "allow" and texts and untrusted:
            out.ignored.append(
                f"{shown}: permissions.allow ignored: this workspace is not trusted (/trust on, "
                "or --trust-workspace, lets the project allow tool calls)"
            )
            continue
        for text in texts:
            try:
                lists[action].append(parse_claude_rule(str(text), f"{shown}: permissions.{action}"))
            except ConfigError as exc:
                out.unused.append(f"{exc}; not used")
    for key, how in _OTHER_KEYS.items():
        if key in perms:
            out.unused.append(f"{shown}: permissions.{key} not taken: {how}")


def call_matches(rule: Rule, tool_name: str, kind: str, args: dict[str, object], workspace: Path) -> bool:
    """Whether `rule` names this tool call (a hook's Claude Code `if` condition): the tool, and its command
    (any simple command of the line), URL or path. A command line that cannot be parsed matches (the hook
    runs rather than being skipped on a line nobody can read)."""
    if not rule.applies_to(tool_name, kind):
        return False
    if rule.pattern is None:
        return True
    if tool_name == "bash":
        from kimicode.permissions.shellparse import ShellParseError, parse

        command = args.get("command")
        try:
            commands = parse(command if isinstance(command, str) else "")
        except ShellParseError:
            return True
        return any(rule.matches_command(cmd.text) for cmd in commands)
    if tool_name == "web_fetch":
        return rule.matches_url(args.get("url"))
    raw = args.get("path")
    if not isinstance(raw, str):
        return True
    import os

    path = Path(os.path.realpath(os.path.join(workspace, os.path.expanduser(raw))))
    return rule.matches_path(path, workspace)
