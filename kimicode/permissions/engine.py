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
   - bash (`kimicode.permissions.bashcheck`): runs when every simple command matches an `allow` rule or is
     read-only (in any mode, `plan` included), every word is static, no program executes or writes
     through its options (`kimicode.permissions.programs`), no argument names a secret file, and every output
     redirection is a write the mode allows; inside the OS sandbox it runs in `default` and
     `accept-edits`; anything else asks. A command line that cannot be parsed is never allowed by a rule.

Paths are resolved (`..` and symbolic links followed) before any check, so a link inside the
workspace that points outside counts as outside.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kimicode.config.choices import PERMISSION_MODES, PermissionMode
from kimicode.permissions.decision import Decision, path_rule_hit, rule_text, shown_path, specific_allow
from kimicode.permissions.pathresolve import call_paths, resolve
from kimicode.permissions.policy import Policy, Rule, RuleAction, Rules, glob_may_match_sensitive
from kimicode.permissions.shellparse import ShellParseError, parse
from kimicode.permissions.subjects import Place, ToolLike
from kimicode.permissions.unsandboxed import short_list_admits

MODES = PERMISSION_MODES

__all__ = ["MODES", "Decision", "PermissionMode", "decide", "denial_message", "read_only_command", "target_path"]


def target_path(tool: ToolLike, args: Mapping[str, Any], ctx: Place) -> str | None:
    """The file an edit tool would change, resolved, or None."""
    raw = args.get("path")
    if tool.kind == "edit" and isinstance(raw, str):
        return str(ctx.resolve(raw))
    return None


def decide(tool: ToolLike, args: Mapping[str, Any], mode: str, ctx: Place, policy: Policy | None = None) -> Decision:
    """Apply the rules and the permission mode to one call (see the module docstring)."""
    policy = policy if policy is not None else Policy()
    if tool.name == "bash" and tool.kind == "execute":
        return _decide_bash(tool, args, mode, ctx, policy)
    if tool.kind == "read":
        return _decide_read(tool, args, mode, ctx, policy)
    if tool.kind == "edit":
        return _decide_edit(tool, args, mode, ctx, policy)
    return _decide_other(tool, mode, policy, args)


# -- helpers ----------------------------------------------------------------------------------------


def _inside(path: Path, ctx: Place) -> bool:
    return ctx.is_inside(path)


def _rule_gate(tool: ToolLike, rules: Rules, paths: list[Path], ctx: Place) -> Decision | None:
    """A deny rule refuses, an ask rule asks, for any of the paths a file tool touches (any mode)."""
    hit = path_rule_hit(rules.for_tool("deny", tool.name, tool.kind), paths, ctx)
    if hit is not None:
        return Decision("deny", f"{tool.name} is denied by the rule {rule_text(hit)}", by_rule=True)
    hit = path_rule_hit(rules.for_tool("ask", tool.name, tool.kind), paths, ctx)
    if hit is not None:
        return Decision("ask", f"the rule {rule_text(hit)} asks before {tool.name}", by_rule=True)
    return None


# -- reads ------------------------------------------------------------------------------------------


def _decide_read(tool: ToolLike, args: Mapping[str, Any], mode: str, ctx: Place, policy: Policy) -> Decision:
    rules = policy.rules
    paths = call_paths(tool, args, ctx)
    gated = _rule_gate(tool, rules, paths, ctx)
    if gated is not None:
        return gated
    if mode == "yolo":
        return Decision("allow")
    allow = rules.for_tool("allow", tool.name, tool.kind)
    for path in paths:
        why = policy.sensitive(path)
        if why and not specific_allow(allow, path, ctx):
            shown = shown_path(path, ctx)
            return Decision("ask", f"{tool.name} would read {shown}, which is sensitive: {why}", f"read({shown})")
    if tool.name == "grep":  # it reads every (non-hidden) file below a directory
        for path in paths:
            twin = _linked_secret_below(path, policy)
            if twin is not None and not specific_allow(allow, twin, ctx):
                shown = shown_path(twin, ctx)
                return Decision(
                    "ask",
                    f"{tool.name} would read {shown}, which is sensitive: {policy.sensitive(twin)}",
                    f"read({shown})",
                )
    glob = args.get("glob")
    if (
        isinstance(glob, str)
        and glob_may_match_sensitive(glob)
        and not all(specific_allow(allow, p, ctx) for p in paths)
    ):
        return Decision("ask", f"{tool.name} with glob {glob!r} would search files that usually hold secrets")
    return Decision("allow")


_LINK_SCAN_LIMIT = 20000


def _linked_secret_below(root: Path, policy: Policy) -> Path | None:
    """A file below the directory `root` that a search reads (not hidden) and that is a hard link to a
    sensitive file (`notes.txt` sharing `.env`'s inode). Only multiply-linked files are examined, and at
    most `_LINK_SCAN_LIMIT` entries (a larger tree is searched without this check)."""
    if not root.is_dir():
        return None
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "node_modules"]
        for name in filenames:
            seen += 1
            if seen > _LINK_SCAN_LIMIT:
                return None
            if name.startswith("."):
                continue
            path = Path(dirpath) / name
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if st.st_nlink > 1 and stat.S_ISREG(st.st_mode) and policy.sensitive(path):
                return path
    return None


# -- writes -----------------------------------------------------------------------------------------


def _decide_edit(tool: ToolLike, args: Mapping[str, Any], mode: str, ctx: Place, policy: Policy) -> Decision:
    rules = policy.rules
    paths = call_paths(tool, args, ctx)
    gated = _rule_gate(tool, rules, paths, ctx)
    if gated is not None:
        return gated
    later = _runs_later_edit(tool, paths, mode, ctx, policy)
    if later is not None:
        return later
    if mode == "yolo":
        return Decision("allow")
    if mode == "plan":
        return Decision("deny", f"{tool.name} changes files, and nothing is changed in plan mode")
    allow = rules.for_tool("allow", tool.name, tool.kind)
    if not paths:
        return Decision("ask", f"{tool.name} changes files (no path to check)")
    if all(specific_allow(allow, p, ctx) for p in paths):
        return Decision("allow")
    for path in paths:
        shown = shown_path(path, ctx)
        why = policy.write_care(path)
        if why and not specific_allow(allow, path, ctx):
            return Decision("ask", f"{tool.name} would write {shown}: {why}", f"edit({shown})")
        if not _inside(path, ctx) and not specific_allow(allow, path, ctx):
            return Decision("ask", f"{tool.name} would write outside the workspace ({path})", f"edit({path})")
    if mode == "accept-edits" or any(r.pattern is None for r in allow):
        return Decision("allow")
    shown = shown_path(paths[0], ctx)
    return Decision("ask", f"{tool.name} changes files (permission mode {mode!r})", f"edit({shown})")


def _runs_later_edit(tool: ToolLike, paths: list[Path], mode: str, ctx: Place, policy: Policy) -> Decision | None:
    """A write to a place that runs later (`kimicode.permissions.runslater`): a firm question in every mode
    but yolo; refused in yolo with the sandbox (nobody to ask; the sandbox's promise holds)."""
    for path in paths:
        why = policy.config(path)
        if why and mode == "yolo" and policy.read_only_sandbox:
            return Decision(
                "deny",
                f"{tool.name} would write {shown_path(path, ctx)}: {why}. --yolo skips the "
                "questions, not the sandbox's protection of what runs later (only --yolo --sandbox "
                "off writes it)",
            )
        if why and mode != "yolo":
            return Decision("ask", f"{tool.name} would write {shown_path(path, ctx)}: {why}", firm=True)
    return None


# -- other tools ------------------------------------------------------------------------------------


_SEARCH_TOOLS = ("web_search", "$web_search")
"""Web search (a provider's `web_search`, Moonshot's built-in `$web_search`): network access, gated like
web_fetch. Rules naming `web_search` cover both; a `web_fetch` deny or ask rule without a domain covers
them too (no network for the model), an allow rule for web_fetch does not."""


def _query(args: Mapping[str, Any] | None) -> str:
    """A search's query as the approval shows it (Moonshot's built-in search does not tell kimicode)."""
    query = (args or {}).get("query")
    if not isinstance(query, str):
        return "what the model chose (on Moonshot's server; kimicode does not see the query)"
    return repr(query[:300] + ("…" if len(query) > 300 else ""))


def _decide_other(tool: ToolLike, mode: str, policy: Policy, args: Mapping[str, Any] | None = None) -> Decision:
    """Tools without paths or commands: rules by name (web_fetch rules also by domain); `execute`
    tools and web search ask, `other` ones run."""
    rules = policy.rules
    url = (args or {}).get("url")
    search = tool.name in _SEARCH_TOOLS

    def hits(action: RuleAction) -> list[Rule]:
        if search:
            found = [r for name in _SEARCH_TOOLS for r in rules.for_tool(action, name, tool.kind)]
            fetch = [r for r in rules.for_tool(action, "web_fetch", tool.kind) if r.pattern is None]
            return found + (fetch if action != "allow" else [])
        found = rules.for_tool(action, tool.name, tool.kind)
        return [r for r in found if r.matches_url(url)] if tool.name == "web_fetch" else found

    deny = hits("deny")
    if deny:
        return Decision("deny", f"{tool.name} is denied by the rule {rule_text(deny[0])}", by_rule=True)
    ask = hits("ask")
    if ask:
        return Decision("ask", f"the rule {rule_text(ask[0])} asks before {tool.name}", by_rule=True)
    if mode == "yolo" or (tool.kind != "execute" and not search) or hits("allow"):
        return Decision("allow")
    action = (
        "fetches from the network"
        if tool.name == "web_fetch"
        else f"searches the web for {_query(args)} (the query leaves this machine)"
        if search
        else "calls a tool of an MCP server"
        if tool.name.startswith("mcp__")
        else "runs commands"
    )
    return Decision("ask", f"{tool.name} {action} (permission mode {mode!r})", "web_search" if search else tool.name)


# -- bash -------------------------------------------------------------------------------------------


def _decide_bash(tool: ToolLike, args: Mapping[str, Any], mode: str, ctx: Place, policy: Policy) -> Decision:
    """The bash decision; an allowed line is checked again as plan mode without any allow rule or
    sandbox: when that still allows it, the read-only allowance alone admits it and it runs in the
    read-only sandbox (whatever gap the program table has, the command cannot write). The program
    tables load on the first bash call (a run without one never pays for them)."""
    from kimicode.permissions.bashcheck import decide_bash

    decision = decide_bash(tool, args, mode, ctx, policy)
    if decision.verdict != "allow":
        return decision
    if not policy.read_only_sandbox and mode != "yolo" and not policy.sandboxed:
        unlisted = _off_short_list(args, policy)
        if unlisted is not None:
            why = (
                f"`{unlisted}`: without the OS sandbox only a short list of programs runs without asking "
                '(docs/permissions.md, "Without bubblewrap")'
            )
            return Decision("ask", why, _suggest_rule(unlisted))
    if decide_bash(tool, args, "plan", ctx, policy.read_only_view()).verdict == "allow":
        return replace(decision, profile="read-only")
    return decision


def _off_short_list(args: Mapping[str, Any], policy: Policy) -> str | None:
    """The first simple command of the line that no allow rule names and that is not on the short list
    of `kimicode.permissions.unsandboxed`, or None."""
    allow = policy.rules.for_tool("allow", "bash", "execute")
    if any(r.pattern is None for r in allow):
        return None
    command = args.get("command")
    try:
        commands = parse(command if isinstance(command, str) else "")
    except ShellParseError:
        return str(command)
    for cmd in commands:
        argv = [w.text for w in cmd.argv]
        if not argv or any(r.matches_command(cmd.text) for r in allow if not r.literal):
            continue
        if any(r.literal and r.pattern == command for r in allow):
            continue
        if not short_list_admits(argv):
            return cmd.text
    return None


def _suggest_rule(text: str) -> str:
    return f"bash({text})" if len(text) <= 60 and "(" not in text and ")" not in text else ""


@dataclass(frozen=True)
class _Workspace:
    """A bare `Place` for `read_only_command`."""

    workspace: Path

    def resolve(self, path: str) -> Path:
        return resolve(path, self.workspace).path

    def is_inside(self, path: Path) -> bool:
        root = Path(os.path.realpath(self.workspace))
        return path == root or root in path.parents


@dataclass(frozen=True)
class _Bash:
    name: str = "bash"
    kind: str = "execute"
    paths: None = None


def read_only_command(command: str, workspace: Path | str = ".") -> bool:
    """The engine's own verdict: True when the read-only allowance alone runs `command` in `workspace`
    (plan mode, no rules: every program and option known not to write or run other programs, no
    sensitive file, no expansion). For approval callbacks: a prefix test such as
    `command.startswith("git ")` also approves `git -c alias.x='!sh -c ...' x`."""
    ws = Path(os.path.realpath(workspace))
    policy = Policy(workspace=ws)
    return decide(_Bash(), {"command": command}, "plan", _Workspace(ws), policy).verdict == "allow"


# -- messages ---------------------------------------------------------------------------------------


def _ways_to_allow(tool: ToolLike, mode: str, decision: Decision | None) -> list[str]:
    """The flags that would let a headless run make the refused call (never the mode already in use)."""
    if decision is not None and decision.firm:  # what runs later: no rule or mode writes it unasked
        return ["--yolo (with --sandbox off where the OS sandbox runs: it keeps what runs later read-only)"]
    suggestion = decision.suggestion if decision is not None else ""
    via = " ".join(f"--allow {shlex.quote(rule)}" for rule in suggestion.splitlines())  # one per part
    if tool.kind == "edit" and mode != "accept-edits":
        return [via, "--permission-mode accept-edits (file edits in the workspace)", "--yolo (everything)"]
    if tool.kind == "edit" or tool.kind == "read":
        return [via, "--yolo (everything)"]
    return [via, "--yolo (--permission-mode yolo, every command)"]


def denial_message(tool: ToolLike, mode: str, reason: str, headless: bool, decision: Decision | None = None) -> str:
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
        how = "the user can allow it with " + " or ".join(o for o in _ways_to_allow(tool, mode, decision) if o)
        return (
            f"Permission denied: {reason}. This is a non-interactive run, so nothing could be approved; "
            f"{how}. Do not retry this call; continue without it or explain what you need."
        )
    return f"Permission denied by the user: {reason}."
