"""The one place that decides whether a tool call may run, before it runs.

`decide(tool, args, mode, ctx, policy)` returns `allow`, `ask` (the user, or the approval callback,
must say yes; headless runs have nobody to ask, so it means no) or `deny`. In order:

1. A `deny` rule that matches: deny. For bash, a rule matches when it matches any simple command of
   the (parsed) command line, or, for `edit(...)`/`read(...)` rules, a redirection target.
2. An `ask` rule that matches: ask.
3. `yolo`: allow.
4. The mode and the `allow` rules (see `docs/permissions.md` for the table):
   - reads run, except files that probably hold secrets (`.env*`, private keys, `~/.ssh`, `~/.aws`,
     cloud credentials, kimicode's config): ask, unless an `allow` rule with a path names them;
   - writes: `default` asks, `accept-edits` runs them inside the workspace, `plan` refuses; outside
     the workspace, to secrets or to `.git` they ask unless an `allow` rule with a path names them;
     kimicode's own configuration always asks;
   - bash: runs when every simple command matches an `allow` rule (in any mode, `plan` included), no
     argument names a secret file, and every output redirection is a write the mode allows; inside the
     OS sandbox it runs in `default` and `accept-edits`; anything else asks. A command line that
     cannot be parsed is never allowed by a rule.

Paths are resolved (`..` and symbolic links followed) before any check, so a link inside the
workspace that points outside counts as outside.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kimicode.agent.policy import Policy, Rule, Rules, glob_may_match_sensitive, is_special_device
from kimicode.agent.shellparse import Redirect, ShellParseError, SimpleCommand, Word, parse
from kimicode.tools.base import Tool, ToolContext

PermissionMode = Literal["default", "accept-edits", "plan", "yolo"]
MODES: tuple[PermissionMode, ...] = ("default", "accept-edits", "plan", "yolo")

__all__ = ["MODES", "Decision", "PermissionMode", "decide", "denial_message", "target_path"]


@dataclass(frozen=True)
class Decision:
    """`allow` runs, `ask` needs the user's (or the approval callback's) yes, `deny` never runs."""

    verdict: Literal["allow", "ask", "deny"]
    reason: str = ""
    suggestion: str = ""
    """A rule that would allow this call (`bash(npm test)`), offered in headless denials."""
    by_rule: bool = False
    """True when a user's rule (not the mode) decided."""


def target_path(tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> str | None:
    """The file an edit tool would change, resolved, or None."""
    raw = args.get("path")
    if tool.kind == "edit" and isinstance(raw, str):
        return str(ctx.resolve(raw))
    return None


def decide(
    tool: Tool, args: Mapping[str, Any], mode: str, ctx: ToolContext, policy: Policy | None = None
) -> Decision:
    """Apply the rules and the permission mode to one call (see the module docstring)."""
    policy = policy if policy is not None else Policy()
    if tool.name == "bash" and tool.kind == "execute":
        return _decide_bash(tool, args, mode, ctx, policy)
    if tool.kind == "read":
        return _decide_read(tool, args, mode, ctx, policy)
    if tool.kind == "edit":
        return _decide_edit(tool, args, mode, ctx, policy)
    return _decide_other(tool, mode, policy)


# -- helpers ----------------------------------------------------------------------------------------


def _paths(tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> list[Path]:
    """The resolved paths a file tool works on (a read tool without one works on the workspace)."""
    raw: list[str] = []
    for key in ("path", "file_path"):
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            raw.append(value)
    many = args.get("paths")
    if isinstance(many, list):
        raw.extend(v for v in many if isinstance(v, str) and v.strip())
    patch = args.get("input")
    if tool.kind == "edit" and isinstance(patch, str):  # apply_patch: every file the patch touches
        from kimicode.tools.patch import patch_paths

        raw.extend(p for p in patch_paths(patch) if p.strip())
    if not raw and tool.kind == "read":
        raw.append(".")
    return [ctx.resolve(p) for p in raw]


def _shown(path: Path, ctx: ToolContext) -> str:
    """A path for messages and suggested rules: workspace-relative inside it, else absolute."""
    root = Path(os.path.realpath(ctx.workspace))
    if path != root and root in path.parents:
        return str(path.relative_to(root))
    return str(path)


def _rule_text(rule: Rule) -> str:
    return f"`{rule.raw}`" + (f" ({rule.source})" if rule.source else "")


def _path_rule_hit(rules: Sequence[Rule], paths: Sequence[Path], ctx: ToolContext) -> Rule | None:
    """The first rule matching any of `paths` (a rule without a pattern matches everything)."""
    for rule in rules:
        if rule.pattern is None or any(rule.matches_path(p, ctx.workspace) for p in paths):
            return rule
    return None


def _specific_allow(rules: Sequence[Rule], path: Path, ctx: ToolContext) -> bool:
    """True when an allow rule *with a path pattern* names `path` (a bare tool name is not enough for
    secrets, `.git` or places outside the workspace)."""
    return any(r.pattern is not None and r.matches_path(path, ctx.workspace) for r in rules)


def _inside(path: Path, ctx: ToolContext) -> bool:
    return ctx.is_inside(path)


def _rule_gate(tool: Tool, rules: Rules, paths: list[Path], ctx: ToolContext) -> Decision | None:
    """A deny rule refuses, an ask rule asks, for any of the paths a file tool touches (any mode)."""
    hit = _path_rule_hit(rules.for_tool("deny", tool.name, tool.kind), paths, ctx)
    if hit is not None:
        return Decision("deny", f"{tool.name} is denied by the rule {_rule_text(hit)}", by_rule=True)
    hit = _path_rule_hit(rules.for_tool("ask", tool.name, tool.kind), paths, ctx)
    if hit is not None:
        return Decision("ask", f"the rule {_rule_text(hit)} asks before {tool.name}", by_rule=True)
    return None


# -- reads ------------------------------------------------------------------------------------------


def _decide_read(tool: Tool, args: Mapping[str, Any], mode: str, ctx: ToolContext, policy: Policy) -> Decision:
    rules = policy.rules
    paths = _paths(tool, args, ctx)
    gated = _rule_gate(tool, rules, paths, ctx)
    if gated is not None:
        return gated
    if mode == "yolo":
        return Decision("allow")
    allow = rules.for_tool("allow", tool.name, tool.kind)
    for path in paths:
        why = policy.sensitive(path)
        if why and not _specific_allow(allow, path, ctx):
            shown = _shown(path, ctx)
            return Decision(
                "ask", f"{tool.name} would read {shown}, which is sensitive: {why}", f"read({shown})"
            )
    glob = args.get("glob")
    if (
        isinstance(glob, str)
        and glob_may_match_sensitive(glob)
        and not all(_specific_allow(allow, p, ctx) for p in paths)
    ):
        return Decision("ask", f"{tool.name} with glob {glob!r} would search files that usually hold secrets")
    return Decision("allow")


# -- writes -----------------------------------------------------------------------------------------


def _decide_edit(tool: Tool, args: Mapping[str, Any], mode: str, ctx: ToolContext, policy: Policy) -> Decision:
    rules = policy.rules
    paths = _paths(tool, args, ctx)
    gated = _rule_gate(tool, rules, paths, ctx)
    if gated is not None:
        return gated
    if mode == "yolo":
        return Decision("allow")
    for path in paths:
        why = policy.config(path)
        if why:
            return Decision("ask", f"{tool.name} would write {_shown(path, ctx)}: {why}")
    if mode == "plan":
        return Decision("deny", f"{tool.name} changes files, and nothing is changed in plan mode")
    allow = rules.for_tool("allow", tool.name, tool.kind)
    if not paths:
        return Decision("ask", f"{tool.name} changes files (no path to check)")
    if all(_specific_allow(allow, p, ctx) for p in paths):
        return Decision("allow")
    for path in paths:
        shown = _shown(path, ctx)
        why = policy.write_care(path)
        if why and not _specific_allow(allow, path, ctx):
            return Decision("ask", f"{tool.name} would write {shown}: {why}", f"edit({shown})")
        if not _inside(path, ctx) and not _specific_allow(allow, path, ctx):
            return Decision("ask", f"{tool.name} would write outside the workspace ({path})", f"edit({path})")
    if mode == "accept-edits" or any(r.pattern is None for r in allow):
        return Decision("allow")
    shown = _shown(paths[0], ctx)
    return Decision("ask", f"{tool.name} changes files (permission mode {mode!r})", f"edit({shown})")


# -- other tools ------------------------------------------------------------------------------------


def _decide_other(tool: Tool, mode: str, policy: Policy) -> Decision:
    """Tools without paths or commands: rules by name; `execute` tools ask, `other` ones run."""
    rules = policy.rules
    deny = rules.for_tool("deny", tool.name, tool.kind)
    if deny:
        return Decision("deny", f"{tool.name} is denied by the rule {_rule_text(deny[0])}", by_rule=True)
    ask = rules.for_tool("ask", tool.name, tool.kind)
    if ask:
        return Decision("ask", f"the rule {_rule_text(ask[0])} asks before {tool.name}", by_rule=True)
    if mode == "yolo" or tool.kind != "execute" or rules.for_tool("allow", tool.name, tool.kind):
        return Decision("allow")
    action = (
        "fetches from the network" if tool.name == "web_fetch"
        else "calls a tool of an MCP server" if tool.name.startswith("mcp__")
        else "runs commands"
    )
    return Decision("ask", f"{tool.name} {action} (permission mode {mode!r})", tool.name)


# -- bash -------------------------------------------------------------------------------------------


def _decide_bash(tool: Tool, args: Mapping[str, Any], mode: str, ctx: ToolContext, policy: Policy) -> Decision:
    rules = policy.rules
    deny = rules.for_tool("deny", tool.name, tool.kind)
    ask = rules.for_tool("ask", tool.name, tool.kind)
    allow = rules.for_tool("allow", tool.name, tool.kind)
    confined = policy.sandboxed and mode in ("default", "accept-edits")
    command = args.get("command")
    if not isinstance(command, str):
        command = ""
    try:
        commands = parse(command)
    except ShellParseError as exc:
        if (mode == "yolo" or confined) and not deny and not ask:
            return Decision("allow")
        return Decision("ask", f"the command cannot be checked against the permission rules: {exc}")

    # 1. deny rules: any simple command, or any redirection target, they match. A deny rule also sees
    #    through wrappers and paths (`sudo rm`, `X=1 rm`, `/bin/rm`) and into `sh -c '...'` / `eval`.
    edit_deny = rules.for_tool("deny", "", "edit")
    read_deny = rules.for_tool("deny", "", "read")
    restricting = [r for r in (*deny, *ask) if r.pattern is not None]
    if restricting:
        nested, opaque = _nested_commands(commands)
        if opaque is not None:
            return Decision("ask", f"cannot tell whether `{opaque}` is denied by the rules: the script it runs "
                                   "cannot be parsed")
        commands = [*commands, *nested]
    for cmd in commands:
        forms = _deny_forms(cmd)
        for rule in deny:
            if rule.pattern is None or any(rule.matches_command(form) for form in forms):
                return Decision("deny", f"`{cmd.text}` is denied by the rule {_rule_text(rule)}", by_rule=True)
        for redirect, path in _redirect_paths(cmd, ctx, policy):
            kind = redirect.kind
            if path is None:
                continue
            rule_list = edit_deny if kind == "write" else read_deny if kind == "read" else []
            hit = _path_rule_hit(rule_list, [path], ctx)
            if hit is not None:
                return Decision(
                    "deny", f"the redirection to {_shown(path, ctx)} is denied by the rule {_rule_text(hit)}",
                    by_rule=True,
                )
    dynamic = [cmd for cmd in commands if cmd.name is not None and cmd.name.dynamic]
    if dynamic and any(r.pattern is not None for r in deny):
        return Decision(
            "ask",
            f"cannot tell whether `{dynamic[0].text}` is denied by the rules: its command name is computed",
        )

    # 2. ask rules (matched like deny rules)
    for cmd in commands:
        forms = _deny_forms(cmd)
        for rule in ask:
            if rule.pattern is None or any(rule.matches_command(form) for form in forms):
                return Decision("ask", f"the rule {_rule_text(rule)} asks before `{cmd.text}`", by_rule=True)

    # 3. modes that run everything
    if mode == "yolo" or confined:
        return Decision("allow")

    # 4. allow rules, command by command
    edit_allow = rules.for_tool("allow", "", "edit")
    read_allow = rules.for_tool("allow", "", "read")
    for cmd in commands:
        if cmd.words:
            if cmd.name is not None and cmd.name.dynamic:
                return Decision("ask", f"`{cmd.text}`: the command name is computed, so no rule can allow it")
            if not any(rule.matches_command(cmd.text) for rule in allow):
                return Decision("ask", _bash_reason(cmd, mode, allow), _suggest(cmd))
        for word in cmd.words[len(cmd.assignments) + 1 :] if cmd.name else cmd.words:
            path = _word_path(word, ctx, policy)
            if path is not None and policy.sensitive(path) and not _specific_allow(read_allow, path, ctx):
                return Decision("ask", f"`{cmd.text}` names {_shown(path, ctx)}, which is sensitive: "
                                f"{policy.sensitive(path)}", f"read({_shown(path, ctx)})")
        for redirect, path in _redirect_paths(cmd, ctx, policy):
            problem = _redirect_problem(redirect, path, mode, ctx, policy, edit_allow, read_allow)
            if problem:
                return Decision("ask", f"`{cmd.text or redirect.target.raw}`: {problem}")
    return Decision("allow")


_WRAPPERS: dict[str, frozenset[str]] = {
    # program -> its options that take a separate value
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "nohup": frozenset(),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir", "--split-string"}),
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "--user", "--group"}),
    "doas": frozenset({"-u", "-C"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p"}),
    "time": frozenset({"-f", "-o", "--format", "--output"}),
    "timeout": frozenset({"-k", "-s", "--kill-after", "--signal"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "xargs": frozenset({"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter",
                        "--max-args", "--max-procs", "--max-lines", "--replace"}),
    "setsid": frozenset(),
    "caffeinate": frozenset(),
}
"""Programs that run the command in their arguments: deny rules look past them."""
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash"})


def _argv_forms(cmd: SimpleCommand) -> list[list[str]]:
    """The command's words without its leading assignments, then with the program's base name
    (`/bin/rm` is `rm`), then behind each wrapper (`sudo -u x nice rm -rf y` is also `rm -rf y`)."""
    forms: list[list[str]] = []
    words = [w.text for w in cmd.argv]
    for _ in range(8):
        if not words:
            break
        forms.append(words)
        base = os.path.basename(words[0])
        if base != words[0]:
            words = [base, *words[1:]]
            forms.append(words)
        value_options = _WRAPPERS.get(base)
        if value_options is None:
            break
        words = words[1:]
        while words and (words[0].startswith("-") or re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0])
                         or (base == "timeout" and re.fullmatch(r"[0-9.]+[smhd]?", words[0]))):
            option = words.pop(0)
            if option == "--":
                break
            if option in value_options and words:
                words.pop(0)
    return forms


def _deny_forms(cmd: SimpleCommand) -> list[str]:
    """The texts a deny or ask rule is matched against: the command as written and each of its
    `_argv_forms`. Over-matching here only refuses (or asks) more."""
    if not cmd.words:
        return []
    return [cmd.text, *(" ".join(form) for form in _argv_forms(cmd))]


def _nested_commands(commands: Sequence[SimpleCommand], depth: int = 0) -> tuple[list[SimpleCommand], str | None]:
    """The commands inside `sh -c SCRIPT` and `eval ARGS` (also behind wrappers), parsed, recursively;
    and the text of the first such command whose script cannot be parsed (None when all could)."""
    found: list[SimpleCommand] = []
    for cmd in commands:
        scripts: list[str] = []
        for argv in _argv_forms(cmd):
            name, rest = argv[0], argv[1:]
            if name == "eval" and rest:
                scripts.append(" ".join(rest))
            elif name in _SHELLS and "-c" in rest:
                index = rest.index("-c")
                scripts.append(rest[index + 1] if index + 1 < len(rest) else "")
        for script in scripts:
            if depth >= 3:
                return found, cmd.text
            try:
                inner = parse(script)
            except ShellParseError:
                return found, cmd.text
            deeper, opaque = _nested_commands(inner, depth + 1)
            if opaque is not None:
                return found, opaque
            found += [*inner, *deeper]
    return found, None


def _suggest(cmd: SimpleCommand) -> str:
    """A rule that would allow `cmd`: the command itself, or its first words and `*` when it is long."""
    text = cmd.text
    if len(text) <= 60 and "(" not in text and ")" not in text:
        return f"bash({text})"
    head = " ".join(w.text for w in cmd.words[: len(cmd.assignments) + 2])
    return f"bash({head[:60]}*)" if "(" not in head and ")" not in head else ""


def _bash_reason(cmd: SimpleCommand, mode: str, allow: Sequence[Rule]) -> str:
    if not allow:
        return f"bash runs commands (permission mode {mode!r})"
    return f"bash runs commands (permission mode {mode!r}) and no allow rule matches `{cmd.text}`"


def _expand(word: Word, policy: Policy) -> str | None:
    """A word's value when it is (nearly) literal: `~` and `$HOME` expanded; None when it is computed."""
    text = word.text
    if word.tilde:
        text = os.path.expanduser(text) if not text.startswith("~/") else str(policy.user_home) + text[1:]
        if text == "~":
            text = str(policy.user_home)
    text = re.sub(r"\$\{?HOME\}?(?=/|$)", lambda _m: str(policy.user_home), text)
    if "$" in text or "`" in text:
        return None
    return text


def _word_path(word: Word, ctx: ToolContext, policy: Policy) -> Path | None:
    """The file an argument may name (`--opt=FILE` included), resolved; None for options and computed words."""
    text = _expand(word, policy)
    if text is None:
        return None
    if text.startswith("-"):
        if "=" not in text:
            return None
        text = text.split("=", 1)[1]
    if not text or text.startswith("-"):
        return None
    return ctx.resolve(text)


def _redirect_paths(cmd: SimpleCommand, ctx: ToolContext, policy: Policy) -> list[tuple[Redirect, Path | None]]:
    """Each file redirection of `cmd` with its resolved target (None when the target is computed)."""
    out: list[tuple[Redirect, Path | None]] = []
    for redirect in cmd.redirects:
        if redirect.kind not in ("write", "read"):
            continue
        text = _expand(redirect.target, policy)
        if text is None or redirect.target.dynamic:
            out.append((redirect, None))
        elif is_special_device(text):
            continue
        else:
            out.append((redirect, ctx.resolve(text)))
    return out


def _redirect_problem(
    redirect: Redirect,
    path: Path | None,
    mode: str,
    ctx: ToolContext,
    policy: Policy,
    edit_allow: Sequence[Rule],
    read_allow: Sequence[Rule],
) -> str | None:
    """Why a redirection keeps an otherwise allowed command from running without approval, or None.

    An output redirection is a write and is allowed exactly when the edit tools could write that file
    without asking (`accept-edits` inside the workspace, or an `edit(...)` rule naming it); an input
    redirection from a sensitive file needs a `read(...)` rule naming it.
    """
    target = redirect.target.raw
    if path is None:
        return f"the redirection target {target!r} is computed, so it cannot be checked"
    shown = _shown(path, ctx)
    if redirect.kind == "read":
        why = policy.sensitive(path)
        if why and not _specific_allow(read_allow, path, ctx):
            return f"it reads {shown}, which is sensitive: {why}"
        return None
    why = policy.config(path)
    if why:
        return f"it writes {shown}: {why}"
    if _specific_allow(edit_allow, path, ctx) and mode != "plan":
        return None
    if mode == "plan":
        return f"it writes {shown}, and nothing is changed in plan mode"
    why = policy.write_care(path)
    if why:
        return f"it writes {shown}: {why}"
    if not _inside(path, ctx):
        return f"it writes outside the workspace ({path})"
    if mode == "accept-edits" or any(r.pattern is None for r in edit_allow):
        return None
    return f"it writes {shown} (permission mode {mode!r} asks before file changes)"


# -- messages ---------------------------------------------------------------------------------------


def denial_message(
    tool: Tool, mode: str, reason: str, headless: bool, decision: Decision | None = None
) -> str:
    """What the model is told when a call is refused, including how the user could allow it."""
    if decision is not None and decision.verdict == "deny":
        if decision.by_rule:
            return (
                f"Permission denied: {reason}. The user's permission rules forbid this; do not retry it and "
                "do not try to reach the same result another way."
            )
        if mode == "plan":
            return (
                f"Permission denied: {reason}. The session is in plan mode: read and investigate, then "
                "present your plan; the user switches the mode to carry it out."
            )
    if headless:
        suggestion = decision.suggestion if decision is not None else ""
        via = f"--allow {shlex.quote(suggestion)}" if suggestion else ""
        if tool.kind == "edit":
            options = [via, "--permission-mode accept-edits (file edits in the workspace)", "--yolo (everything)"]
        elif tool.kind == "read":
            options = [via, "--yolo (everything)"]
        else:
            options = [via, "--yolo (--permission-mode yolo, every command)"]
        how = "the user can allow it with " + " or ".join(o for o in options if o)
        return (
            f"Permission denied: {reason}. This is a non-interactive run, so nothing could be approved; "
            f"{how}. Do not retry this call; continue without it or explain what you need."
        )
    return f"Permission denied by the user: {reason}."
