"""Hooks, configured as Claude Code configures them: which commands run on which events.

The structure is Claude Code's, in JSON (`~/.claude/settings.json`, a plugin's `hooks/hooks.json`) or in
TOML (`[[hooks.PreToolUse]]` in kimicode's config.toml):

    {"hooks": {"PreToolUse": [{"matcher": "Bash|Write",
                               "hooks": [{"type": "command", "command": "check.sh", "timeout": 10}]}]}}

Kimi Code's flat form (`[[hooks]]` with `event`, `matcher`, `command`, `timeout`) is read too. A matcher
is empty or `*` (everything), a name, a `|` list or a regular expression matched against the whole name;
tool events match kimicode's tool names, Claude Code's and Kimi Code's (`bash`, `Bash`, `Shell`). Besides
Claude Code's keys a hook may say `on_error = "block"` (a failing hook refuses the call) or
`"continue"`; see `HookSpec.fails_closed` for the default.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kimicode.extensions.places import Scope, claude_settings_files, read_json, read_text

if TYPE_CHECKING:
    from kimicode.permissions.policy import Rule

EVENTS = (
    "SessionStart",
    "SessionEnd",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PermissionRequest",
    "Notification",
    "Stop",
    "SubagentStop",
    "PreCompact",
)
"""The events kimicode runs hooks for (Claude Code's names)."""
DEFAULT_TIMEOUT = 60.0
"""Seconds a hook may run unless it says `timeout` (Claude Code's default)."""
OnError = Literal["block", "continue"]
_BLOCKING_TEXT = re.compile(r"""exit\s*\(?\s*2\b|["']deny["']|["']block["']""")
"""What a hook that was written to refuse contains: `exit 2` / `sys.exit(2)`, or a deny/block answer."""


HookCall = Callable[[bytes], Awaitable[tuple[int, str, str]]]
"""A hook run in-process: the JSON payload in, (exit code, stdout, stderr) out."""


class HookConfigError(ValueError):
    """A hooks table that cannot be used (the message names the file and the entry)."""


@dataclass(frozen=True)
class HookSpec:
    """One configured hook command."""

    event: str
    command: str
    matcher: str = ""
    timeout: float = DEFAULT_TIMEOUT
    on_error: OnError | None = None
    """Explicit `on_error`; None: see `fails_closed`."""
    source: str = ""
    """The file it came from (shown when it fails)."""
    scope: Scope = "user"
    plugin_root: Path | None = None
    """The plugin's folder (`${CLAUDE_PLUGIN_ROOT}`) for a plugin's hook."""
    can_block: bool = False
    """Its command or script contains a refusal (`exit 2`, a deny/block answer)."""
    pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)
    condition: Rule | None = field(default=None, compare=False)
    """Claude Code's `if` (a permission rule such as `Bash(git commit:*)`): the hook runs only for tool
    calls the rule names (kimicode.permissions.claude.call_matches)."""
    call: HookCall | None = field(default=None, compare=False, repr=False)
    """Run this function instead of `command` (a hook function of the program driving kimicode: the Claude
    Agent SDK's hook callbacks): it gets the payload and answers as a command would (exit code, stdout,
    stderr)."""

    def matches(self, values: tuple[str, ...]) -> bool:
        """True when the matcher accepts any of `values` (a tool's names, a session source, ...)."""
        if self.pattern is None:
            return True
        return any(self.pattern.fullmatch(v) for v in values)

    @property
    def fails_closed(self) -> bool:
        """Whether a crash, a timeout or an unexpected exit code refuses what the hook guards.

        `on_error` decides when given. Otherwise PreToolUse and PermissionRequest hooks that were written
        to refuse (their command or script contains `exit 2` or a deny/block answer) fail closed, because
        a guard that crashes must not wave everything through (Claude Code lets the call run); every other
        hook fails open, with one line saying so.
        """
        if self.on_error is not None:
            return self.on_error == "block"
        return self.event in ("PreToolUse", "PermissionRequest") and self.can_block


@dataclass
class HookSet:
    """Every configured hook, by event, and what could not be used."""

    by_event: dict[str, list[HookSpec]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def add(self, spec: HookSpec) -> None:
        bucket = self.by_event.setdefault(spec.event, [])
        if not any(s.command == spec.command and s.matcher == spec.matcher for s in bucket):
            bucket.append(spec)  # the same command from two files runs once (as in Claude Code)

    def matching(self, event: str, values: tuple[str, ...] = ()) -> list[HookSpec]:
        """The hooks of `event` whose matcher accepts `values` (cheap when there are none)."""
        specs = self.by_event.get(event)
        if not specs:
            return []
        return [s for s in specs if s.matches(values)]

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_event.values())

    def all(self) -> list[HookSpec]:
        return [s for specs in self.by_event.values() for s in specs]


def compile_matcher(matcher: str, where: str) -> re.Pattern[str] | None:
    """None for "match everything", else the compiled expression (HookConfigError when it is invalid)."""
    text = matcher.strip()
    if text in ("", "*"):
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise HookConfigError(f"{where}: matcher {matcher!r} is not a valid regular expression ({exc})") from None


def expand_command(command: str, workspace: Path, plugin_root: Path | None) -> str:
    """The command with `$CLAUDE_PROJECT_DIR`/`$KIMICODE_PROJECT_DIR` and `${CLAUDE_PLUGIN_ROOT}` written
    out, to find the script it runs. The command itself runs as written, with these variables set in
    its environment (so the shell expands them, quoting included)."""
    out = command
    for name, value in hook_variables(workspace, plugin_root).items():
        out = out.replace("${" + name + "}", value).replace("$" + name, value)
    return out


def hook_variables(workspace: Path, plugin_root: Path | None) -> dict[str, str]:
    """The variables a hook's environment gets besides the usual ones."""
    values = {"CLAUDE_PROJECT_DIR": str(workspace), "KIMICODE_PROJECT_DIR": str(workspace)}
    if plugin_root is not None:
        values["CLAUDE_PLUGIN_ROOT"] = str(plugin_root)
    return values


def _written_to_block(command: str, workspace: Path) -> bool:
    """True when the command, or a script it names, contains a refusal (see HookSpec.fails_closed)."""
    if _BLOCKING_TEXT.search(command):
        return True
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    for word in words[:6]:
        path = Path(word).expanduser()
        if not path.is_absolute():
            path = workspace / path
        if word.startswith("-") or not path.is_file():
            continue
        text = read_text(path)
        if text is not None and _BLOCKING_TEXT.search(text):
            return True
    return False


def parse_hooks(
    table: Any, source: str, scope: Scope, workspace: Path, plugin_root: Path | None = None
) -> tuple[list[HookSpec], list[str]]:
    """The hooks of one `hooks` table (Claude Code's structure); unknown events and hook types are
    reported in the problems and skipped; a malformed entry raises HookConfigError."""
    specs: list[HookSpec] = []
    problems: list[str] = []
    if table is None:
        return specs, problems
    if isinstance(table, list):  # Kimi Code's `[[hooks]]` entries: {event, matcher, command, timeout}
        table = _from_flat(table, source)
    if not isinstance(table, Mapping):
        raise HookConfigError(f"{source}: hooks must be a table of events, got {type(table).__name__}")
    for event, groups in table.items():
        where = f"{source}: hooks.{event}"
        if event not in EVENTS:
            problems.append(f"{where}: kimicode has no {event} event; these hooks are not run")
            continue
        if not isinstance(groups, list):
            raise HookConfigError(f"{where}: must be a list of {{matcher, hooks}} entries")
        for i, group in enumerate(groups):
            specs.extend(_parse_group(group, event, f"{where}[{i}]", source, scope, workspace, plugin_root, problems))
    return specs, problems


def _from_flat(entries: list[Any], source: str) -> dict[str, list[Any]]:
    """Kimi Code's flat list of hooks as Claude Code's table of events (one group per entry)."""
    table: dict[str, list[Any]] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("event"), str):
            raise HookConfigError(f"{source}: hooks[{i}]: each [[hooks]] entry needs `event` and `command`")
        hook = {k: v for k, v in entry.items() if k not in ("event", "matcher")}
        table.setdefault(entry["event"], []).append({"matcher": entry.get("matcher", ""), "hooks": [hook]})
    return table


def _parse_group(
    group: Any,
    event: str,
    where: str,
    source: str,
    scope: Scope,
    workspace: Path,
    plugin_root: Path | None,
    problems: list[str],
) -> list[HookSpec]:
    if not isinstance(group, Mapping):
        raise HookConfigError(f"{where}: must be a table with `hooks` (and an optional `matcher`)")
    matcher = group.get("matcher", "")
    if not isinstance(matcher, str):
        raise HookConfigError(f"{where}: matcher must be a string")
    pattern = compile_matcher(matcher, where)
    entries = group.get("hooks")
    if not isinstance(entries, list):
        raise HookConfigError(f"{where}: `hooks` must be a list of {{type, command}} entries")
    out: list[HookSpec] = []
    for j, entry in enumerate(entries):
        here = f"{where}.hooks[{j}]"
        if not isinstance(entry, Mapping):
            raise HookConfigError(f"{here}: must be a table with `type` and `command`")
        kind = entry.get("type", "command")
        if kind != "command":
            problems.append(f'{here}: hooks of type {kind!r} are not supported (only "command"); skipped')
            continue
        command = entry.get("command")
        if not isinstance(command, str) or not command.strip():
            raise HookConfigError(f"{here}: `command` must be a non-empty string")
        timeout = entry.get("timeout", DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise HookConfigError(f"{here}: `timeout` must be a positive number of seconds, got {timeout!r}")
        on_error = entry.get("on_error")
        if on_error not in (None, "block", "continue"):
            raise HookConfigError(f'{here}: `on_error` must be "block" or "continue", got {on_error!r}')
        usable, condition = _condition(entry.get("if"), here, problems)
        if not usable:
            continue
        expanded = expand_command(command, workspace, plugin_root)
        out.append(
            HookSpec(
                event,
                command,
                matcher,
                float(timeout),
                on_error,
                source,
                scope,
                plugin_root,
                _written_to_block(expanded, workspace) if event in ("PreToolUse", "PermissionRequest") else False,
                pattern,
                condition,
            )
        )
    return out


def load_hooks(
    workspace: Path,
    config_files: Mapping[Path, Mapping[str, Any]],
    config_hooks: Any,
    *,
    trusted: bool,
    plugins: Sequence[tuple[str, Path]] = (),
) -> HookSet:
    """Every hook: kimicode's config files (`config_files`: each file's tables as the configuration loader
    read them, `Settings.parsed`; the project's only when trusted; or the already-merged `config_hooks` when
    the settings came from no file), Claude Code's settings files, and each enabled plugin's
    `hooks/hooks.json` (`plugins` as (name, folder)). Raises HookConfigError."""
    found = HookSet()
    project_config = workspace / ".kimicode" / "config.toml"
    tables: list[tuple[Any, str, Scope, Path | None]] = []
    if config_files:
        for path, read in config_files.items():
            is_project = path == project_config
            if is_project and not trusted:
                continue
            tables.append((read.get("hooks"), str(path), "project" if is_project else "user", None))
    else:
        tables.append((config_hooks, "the configuration", "user", None))
    for path, scope in claude_settings_files(workspace, trusted=trusted):
        data, problem = read_json(path)
        if problem:
            found.problems.append(problem)
        elif data is not None:
            tables.append((data.get("hooks"), str(path), scope, None))
    for name, root in plugins:
        path = root / "hooks" / "hooks.json"
        data, problem = read_json(path)
        if problem:
            found.problems.append(f"plugin {name}: {problem}")
        elif data is not None:
            tables.append((data.get("hooks"), f"plugin {name} ({path})", "plugin", root))
    for table, source, scope, plugin_root in tables:
        specs, problems = parse_hooks(table, source, scope, workspace, plugin_root)
        found.problems.extend(problems)
        for spec in specs:
            found.add(spec)
    return found


def _condition(value: Any, where: str, problems: list[str]) -> tuple[bool, Rule | None]:
    """(usable, a hook's `if` as a rule or None without one); not usable (the hook is skipped, said in
    `problems`) when it is not a rule kimicode can apply."""
    if value is None:
        return True, None
    from kimicode.config.endpoint import ConfigError
    from kimicode.permissions.claude import parse_claude_rule

    try:
        return True, parse_claude_rule(str(value), f"{where}: if")
    except ConfigError as exc:
        problems.append(f"{exc}; the hook is skipped")
        return False, None
