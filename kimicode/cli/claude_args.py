"""Claude protocol mode, part 1: when it is on, and Claude Code's command line read as kimicode settings.

A program written on the Claude Agent SDK starts its CLI (`cli_path` in Python, `pathToClaudeCodeExecutable`
in TypeScript) with Claude Code's flags and speaks Claude Code's stream-json control protocol over stdin and
stdout. kimicode answers in that protocol when it is started that way (`is_claude_mode`): by a Claude Agent
SDK (the SDKs set `CLAUDE_CODE_ENTRYPOINT=sdk-py` / `sdk-ts` and pass `--input-format stream-json`), or by
`--claude-protocol` on the command line. The run itself is kimicode/cli/claude_run.py.

Every flag the current SDKs pass is accepted. Those kimicode has an equivalent for become settings; the
rest are listed once in `ClaudeArgs.ignored`, each with the reason (said on stderr and in the init message).
A flag the SDKs never pass is a usage error (exit 2), as for any other kimicode command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from kimicode.cli.ci_flags import FlagError, read_mcp_config

CLAUDE_FLAG = "--claude-protocol"

CLAUDE_MODES = {
    "default": "default",
    "acceptEdits": "accept-edits",
    "plan": "plan",
    "bypassPermissions": "yolo",
    "dontAsk": "default",
}
"""Claude Code's permission modes → kimicode's (`dontAsk` refuses what is not pre-approved: kimicode's headless
`default`). kimicode's own names are accepted too."""
KIMICODE_TO_CLAUDE = {"default": "default", "accept-edits": "acceptEdits", "plan": "plan", "yolo": "bypassPermissions"}
EFFORT = {"low": "low", "medium": "high", "high": "high", "xhigh": "max", "max": "max"}
"""`--effort` → kimicode's reasoning effort (kimicode has low, high and max)."""

_VALUED = (
    "--system-prompt",
    "--system-prompt-file",
    "--append-system-prompt",
    "--append-system-prompt-file",
    "--tools",
    "--allowedTools",
    "--allowed-tools",
    "--disallowedTools",
    "--disallowed-tools",
    "--max-turns",
    "--max-budget-usd",
    "--task-budget",
    "--model",
    "--fallback-model",
    "--betas",
    "--permission-prompt-tool",
    "--permission-mode",
    "--resume",
    "--session-id",
    "--settings",
    "--setting-sources",
    "--plugin-dir",
    "--plugin-dir-no-mcp",
    "--resume-session-at",
    "--resume-drops-turn",
    "--thinking",
    "--max-thinking-tokens",
    "--thinking-display",
    "--effort",
    "--json-schema",
    "--output-format",
    "--input-format",
    "--debug-file",
    "--agent",
    "--channels",
    "--permission-prompts",
    "--project-config-root",
    "--initialize-fields",
    "--managed-settings",
    "--sdk-url",
    "--cwd",
)
_REPEATED = ("--add-dir", "--mcp-config")
_SWITCHES = (
    "--verbose",
    "--continue",
    "--include-partial-messages",
    "--include-hook-events",
    "--strict-mcp-config",
    "--fork-session",
    "--session-mirror",
    "--debug",
    "--debug-to-stderr",
    "--allow-dangerously-skip-permissions",
    "--dangerously-skip-permissions",
    "--await-initialize",
    "--managed-settings-in-initialize",
    "--no-session-persistence",
    "--hard-fail",
    "--print",
    CLAUDE_FLAG,
)
_IGNORED_WHY = {
    "--fallback-model": "kimicode retries the one model",
    "--betas": "Anthropic API betas do not apply",
    "--task-budget": "use --max-budget-usd",
    "--thinking-display": "reasoning is always sent whole",
    "--settings": "kimicode reads its own config.toml (docs/configuration.md)",
    "--setting-sources": "kimicode reads its own config.toml and the trusted project's",
    "--plugin-dir": "install plugins with `kimicode plugin`",
    "--plugin-dir-no-mcp": "install plugins with `kimicode plugin`",
    "--resume-session-at": "rewind with `kimicode undo`",
    "--resume-drops-turn": "rewind with `kimicode undo`",
    "--session-id": "kimicode names its own sessions",
    "--agent": "kimicode has one main agent",
    "--channels": "not supported",
    "--permission-prompts": "not supported",
    "--project-config-root": "the workspace is the process's directory",
    "--initialize-fields": "not supported",
    "--managed-settings": "not supported",
    "--managed-settings-in-initialize": "not supported",
    "--session-mirror": "session stores are not supported; kimicode keeps its own session log",
    "--include-hook-events": "hook runs are sent as system hook_response messages always",
    "--strict-mcp-config": "kimicode starts only the configured servers anyway",
    "--debug": "see ~/.kimicode/sessions for the session log",
    "--debug-file": "see ~/.kimicode/sessions for the session log",
    "--debug-to-stderr": "see ~/.kimicode/sessions for the session log",
    "--sdk-url": "not supported",
    "--hard-fail": "not supported",
}


def is_claude_mode(args: Sequence[str], env: Mapping[str, str]) -> bool:
    """True when kimicode should speak Claude Code's protocol: `--claude-protocol`, or a Claude Agent SDK
    (CLAUDE_CODE_ENTRYPOINT=sdk-*) starting it with stream-json input."""
    if CLAUDE_FLAG in args:
        return True
    if not env.get("CLAUDE_CODE_ENTRYPOINT", "").startswith("sdk"):
        return False
    pairs = zip(args, [*args[1:], ""], strict=True)
    return any(a == "--input-format" and b == "stream-json" for a, b in pairs) or "--input-format=stream-json" in args


class UsageExit(Exception):
    """A command line that cannot be used: the message, for `kimicode: ...` on stderr (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageExit(f"{message} (Claude protocol mode: the flags of the Claude Agent SDK; docs/programs.md)")


def _parser() -> _Parser:
    parser = _Parser(prog="kimicode", add_help=False, allow_abbrev=False)
    for flag in _VALUED:
        parser.add_argument(flag, dest=flag.lstrip("-").replace("-", "_"))
    for flag in _REPEATED:
        parser.add_argument(flag, dest=flag.lstrip("-").replace("-", "_"), action="append", default=[])
    for flag in _SWITCHES:
        parser.add_argument(flag, dest=flag.lstrip("-").replace("-", "_"), action="store_true")
    parser.add_argument("-p", dest="print_", action="store_true")
    parser.add_argument("-c", dest="continue", action="store_true")
    parser.add_argument("-r", dest="resume")
    return parser


@dataclass
class ClaudeArgs:
    """What the command line asked for, in kimicode's terms."""

    settings: dict[str, Any] = field(default_factory=dict)
    """AgentOptions settings (names of its fields)."""
    workspace: Path = field(default_factory=Path.cwd)
    resume: str | None = None
    continue_: bool = False
    fork: bool = False
    persist: bool = True
    partial: bool = False
    permission_tool: bool = False
    """`--permission-prompt-tool stdio`: questions go to the SDK's `can_use_tool` callback."""
    budget: float | None = None
    json_schema: str | None = None
    mcp_servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Servers kimicode starts itself (stdio, http)."""
    sdk_servers: list[str] = field(default_factory=list)
    """Servers that live in the SDK's process (`type: sdk`), reached over the control protocol."""
    ignored: list[str] = field(default_factory=list)
    """`--flag: why`, one per flag that has no effect here."""
    requested_model: str | None = None
    """A Claude model the SDK asked for (kept out of `settings`: kimicode's configured model runs)."""


def parse_claude_args(args: Sequence[str]) -> ClaudeArgs:
    """The command line of a Claude Agent SDK as kimicode settings; UsageExit says what is wrong."""
    ns = vars(_parser().parse_args(list(args)))
    out = ClaudeArgs()
    for name in ("output_format", "input_format"):
        if ns[name] not in (None, "stream-json"):
            raise UsageExit(f"--{name.replace('_', '-')} {ns[name]}: Claude protocol mode speaks stream-json only")
    if ns["cwd"]:
        out.workspace = Path(ns["cwd"])
    _prompt(ns, out)
    _permissions(ns, out)
    _model(ns, out)
    _session(ns, out)
    _servers(ns, out)
    if ns["max_turns"] is not None:
        out.settings["max_turns"] = _number(ns["max_turns"], "--max-turns", int)
    if ns["max_budget_usd"] is not None:
        out.budget = _number(ns["max_budget_usd"], "--max-budget-usd", float)
    if ns["add_dir"]:
        out.settings["add_dirs"] = tuple(Path(d) for d in ns["add_dir"])
    out.partial = ns["include_partial_messages"]
    out.json_schema = ns["json_schema"]
    for flag, why in _IGNORED_WHY.items():
        key = flag.lstrip("-").replace("-", "_")
        if ns.get(key) not in (None, False, []):
            out.ignored.append(f"{flag}: {why}")
    return out


def _number(text: str, flag: str, kind: type[int] | type[float]) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise UsageExit(f"{flag}: not a number: {text!r}") from None
    if value < (1 if kind is int else 0):
        raise UsageExit(f"{flag}: {text} is out of range")
    return value


def _prompt(ns: dict[str, Any], out: ClaudeArgs) -> None:
    """`--system-prompt TEXT` replaces kimicode's system prompt; the SDKs' default `--system-prompt=` (empty)
    keeps kimicode's own (Claude's minimal prompt would leave the model without its tools' conventions)."""
    if ns["system_prompt"]:
        out.settings["system_prompt"] = ns["system_prompt"]
    if ns["system_prompt_file"]:
        from kimicode.cli.ci_flags import read_system_prompt

        try:
            out.settings["system_prompt"] = read_system_prompt(Path(ns["system_prompt_file"]))
        except FlagError as exc:
            raise UsageExit(str(exc)) from None
    append = ns["append_system_prompt"]
    if ns["append_system_prompt_file"]:
        try:
            append = Path(ns["append_system_prompt_file"]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageExit(f"--append-system-prompt-file: cannot read it: {exc}") from None
    if append:
        out.settings["append_system_prompt"] = append


def _rules(text: str | None, flag: str, out: ClaudeArgs) -> tuple[str, ...]:
    """Claude Code's comma-separated tool rules (`Bash(git status:*),Read,mcp__calc__add`), each checked by
    kimicode's rule parser (which reads Claude Code's tool names); one it cannot read is a usage error."""
    from kimicode.config.endpoint import ConfigError
    from kimicode.permissions.policy import parse_rule

    rules: list[str] = []
    for part in _split_rules(text or ""):
        try:
            parse_rule(part, flag)
        except ConfigError as exc:
            raise UsageExit(str(exc)) from None
        rules.append(part)
    return tuple(rules)


def _split_rules(text: str) -> list[str]:
    """Split at the commas outside parentheses (`Bash(a,b),Read` is two rules) and at spaces between rules."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and (ch == "," or (ch == " " and cur and not cur.endswith(","))):
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def _permissions(ns: dict[str, Any], out: ClaudeArgs) -> None:
    mode = ns["permission_mode"]
    if ns["dangerously_skip_permissions"]:
        mode = "bypassPermissions"
    if mode is not None:
        if mode not in CLAUDE_MODES and mode not in KIMICODE_TO_CLAUDE:
            raise UsageExit(f"--permission-mode {mode!r}: expected one of {', '.join(CLAUDE_MODES)}")
        out.settings["permission_mode"] = CLAUDE_MODES.get(mode, mode)
    allow = _rules(ns["allowedTools"] or ns["allowed_tools"], "--allowedTools", out)
    deny = _rules(ns["disallowedTools"] or ns["disallowed_tools"], "--disallowedTools", out)
    if allow:
        out.settings["allow"] = allow
    if deny:
        out.settings["deny"] = deny
    tool = ns["permission_prompt_tool"]
    if tool == "stdio":
        out.permission_tool = True
    elif tool:
        out.ignored.append(f"--permission-prompt-tool {tool}: only stdio (the SDK's can_use_tool) is supported")
    if ns["tools"] is not None and ns["tools"] != "default":
        out.ignored.append("--tools: kimicode offers its own tool set; refuse tools with disallowed_tools")


def _model(ns: dict[str, Any], out: ClaudeArgs) -> None:
    """`--model`: a model kimicode can run is used; a Claude model (the SDK's own default names) is not, and
    kimicode's configured model runs instead (so a program switches to kimi-k3 by its `cli_path` alone)."""
    model = ns["model"]
    if model and is_claude_model(model):
        out.requested_model = model
        out.ignored.append(f"--model {model}: a Claude model; kimicode's configured model runs (KIMI_MODEL)")
    elif model:
        out.settings["model"] = model
    effort = ns["effort"]
    if effort:
        if effort not in EFFORT:
            raise UsageExit(f"--effort {effort!r}: expected one of {', '.join(EFFORT)}")
        out.settings["thinking"] = EFFORT[effort]
    if ns["thinking"] or ns["max_thinking_tokens"]:
        out.ignored.append(
            "--thinking/--max-thinking-tokens: the model reasons at kimicode's effort; set it with effort=low|high|max"
        )


def is_claude_model(model: str) -> bool:
    return model.startswith(("claude-", "anthropic/")) or model in ("sonnet", "opus", "haiku", "opusplan", "default")


def _session(ns: dict[str, Any], out: ClaudeArgs) -> None:
    out.resume = ns["resume"] or None
    out.continue_ = bool(ns["continue"])
    out.fork = bool(ns["fork_session"])
    if ns["no_session_persistence"]:
        out.persist = False
        out.settings["persist"] = False


def _servers(ns: dict[str, Any], out: ClaudeArgs) -> None:
    """`--mcp-config JSON|FILE` (repeatable): `type: sdk` servers live in the SDK's process; the others are
    kimicode's to start, as with its own --mcp-config."""
    for value in ns["mcp_config"]:
        servers = _mcp_servers(value)
        for name, entry in servers.items():
            if entry.get("type") == "sdk":
                out.sdk_servers.append(name)
            else:
                out.mcp_servers[name] = entry


def _mcp_servers(value: str) -> dict[str, dict[str, Any]]:
    if value.lstrip().startswith("{"):
        try:
            data = json.loads(value)
        except ValueError as exc:
            raise UsageExit(f"--mcp-config: invalid JSON: {exc}") from None
        servers = data.get("mcpServers") if isinstance(data, dict) else None
        if not isinstance(servers, dict) or not all(isinstance(v, dict) for v in servers.values()):
            raise UsageExit('--mcp-config: expected {"mcpServers": {NAME: {...}}}')
        return {str(k): dict(v) for k, v in servers.items()}
    try:
        return read_mcp_config(Path(value))
    except FlagError as exc:
        raise UsageExit(str(exc)) from None


def say_ignored(parsed: ClaudeArgs) -> None:
    """Each flag without effect, once, on stderr."""
    for line in parsed.ignored:
        sys.stderr.write(f"kimicode: Claude protocol mode ignores {line}\n")
    sys.stderr.flush()
