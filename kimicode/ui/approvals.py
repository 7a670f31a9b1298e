"""Asking the user before a command runs or a file changes, and remembering what they allowed.

The agent calls `Approver` (its `approve` callback) for each action its permission mode does not allow.
The question shows exactly what will happen: the command, or the path and the diff the tool itself
says it would apply (`Tool.preview`, passed in `ApprovalRequest.preview`; apply_patch included).
Answers: yes once; yes and don't ask again this session for this exact command, for commands starting
with a prefix the user confirms, or for this file; no, with an optional reason the model is told.
Session rules are narrow on purpose: an exact command, or a prefix that only matches simple commands
(no `;`, `&&`, pipes, redirections or substitutions), so approving
`git status` never approves `git status; rm -rf ~`.

Every "don't ask again" answer is also handed to the agent as a rule of its permission engine
(`Approval.remember`: `bash(CMD)` for an exact simple command, `bash(PREFIX:*)` for a prefix,
`edit(PATH)` for a file), so the agent decides later calls with the same parser, program table and
static-or-ask checks as the user's configured rules; `/permissions clear` forgets both.

Subagents started in the same step share the session's `Approver`, so several questions can arrive at
once: they are asked one after the other (a lock), and each is checked against the session rules again
when its turn comes, so "don't ask again" given to the first also answers the ones waiting.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from kimicode.agent.core import Approval, ApprovalRequest
from kimicode.permissions.policy import Rule
from kimicode.permissions.remember import remembered_rule
from kimicode.permissions.shellparse import ShellParseError, parse
from kimicode.termsafe import sanitize
from kimicode.ui.format import diff_text

SHELL_OPERATORS = (";", "&", "|", "<", ">", "`", "$(", "\n", "\r", "\\")
"""Characters that chain, redirect or substitute commands: a prefix rule never matches them."""

PREVIEW_LINES = 200
_TWO_WORD = {
    "git",
    "npm",
    "pnpm",
    "yarn",
    "cargo",
    "go",
    "uv",
    "pip",
    "pip3",
    "poetry",
    "make",
    "docker",
    "kubectl",
    "bun",
    "deno",
    "dotnet",
    "gradle",
    "mvn",
    "brew",
    "apt",
    "just",
    "hatch",
    "tox",
    "nox",
}


def has_shell_operators(command: str) -> bool:
    """True if `command` chains, redirects or substitutes (then only an exact-command rule can match it)."""
    return any(op in command for op in SHELL_OPERATORS)


def suggest_prefix(command: str) -> str:
    """A sensible prefix to offer: `git status`, `npm run`, `pytest`, `python -m pytest`."""
    words = command.split()
    if not words:
        return ""
    if words[0] in ("python", "python3") and len(words) > 2 and words[1] == "-m":
        return " ".join(words[:3])
    if words[0] in _TWO_WORD and len(words) > 1 and not words[1].startswith("-"):
        return " ".join(words[:2])
    return words[0]


def prefix_problem(prefix: str, command: str | None = None) -> str | None:
    """Why `prefix` can't be a rule (empty, has shell operators, doesn't match the command), or None."""
    prefix = prefix.strip()
    if not prefix:
        return "the prefix is empty (that would allow every command)"
    if has_shell_operators(prefix):
        return "a prefix may not contain ; & | < > ` $( or backslashes"
    if any(c in prefix for c in "*()$'\"") or ":*" in prefix:
        return "a prefix may not contain * ( ) $ or quotes"
    if command is not None and not prefix_matches(prefix, command):
        return f"the command does not start with {prefix!r}"
    return None


def prefix_rule(prefix: str) -> Rule:
    """The engine's rule for a confirmed prefix: `bash(PREFIX:*)` (whole words)."""
    rule = remembered_rule("prefix", command=None, path=None, prefix=prefix)
    assert rule is not None
    return rule


def prefix_matches(prefix: str, command: str) -> bool:
    """A prefix rule matches a simple command equal to it or continuing it after a space, as the
    engine reads it: the line parsed, static, one simple command, no redirections."""
    command = command.strip()
    if has_shell_operators(command):
        return False
    try:
        commands = parse(command)
    except ShellParseError:
        return False
    if len(commands) != 1 or commands[0].redirects or not all(w.static for w in commands[0].words):
        return False
    return prefix_rule(prefix).matches_command(commands[0].text)


def remember_rule(request: ApprovalRequest, answer: str, prefix: str | None = None) -> Rule | None:
    """The engine rule for a "don't ask again" answer: `bash(PREFIX:*)`, `edit(PATH)`, or for "this
    exact command" a literal rule that matches only that whole command line."""
    return remembered_rule(answer, command=command_of(request), path=request.path, prefix=prefix)


@dataclass
class SessionRules:
    """What the user allowed for the rest of the session."""

    commands: set[str] = field(default_factory=set)
    prefixes: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)
    calls: set[str] = field(default_factory=set)

    def match(self, request: ApprovalRequest) -> str | None:
        """A description of the rule that allows `request`, or None."""
        command = command_of(request)
        if command is not None:
            if command in self.commands:
                return "this command was allowed for the session"
            for prefix in sorted(self.prefixes, key=len, reverse=True):
                if prefix_matches(prefix, command):
                    return f"commands starting with {prefix!r} were allowed for the session"
            return None
        if request.path is not None:
            return "edits to this file were allowed for the session" if request.path in self.files else None
        return "this call was allowed for the session" if call_key(request) in self.calls else None

    def clear(self) -> None:
        self.commands.clear()
        self.prefixes.clear()
        self.files.clear()
        self.calls.clear()


def command_of(request: ApprovalRequest) -> str | None:
    """The shell command of an execute request, if it has one."""
    command = request.arguments.get("command")
    return command if request.kind == "execute" and isinstance(command, str) else None


def call_key(request: ApprovalRequest) -> str:
    return request.tool + "\x00" + json.dumps(dict(request.arguments), sort_keys=True, ensure_ascii=False)


# -- previews -------------------------------------------------------------------------------------


def edit_preview(request: ApprovalRequest, workspace: Path) -> tuple[str, str]:
    """(diff, note) for an edit request: the diff the tool itself computed (`ApprovalRequest.preview`);
    nothing is recomputed here, so what is shown is exactly what the call would write."""
    if request.preview_error is not None:
        return "", f"as it stands, the call would fail: {request.preview_error}"
    diff = request.preview
    if diff is None:  # a custom edit tool without a preview: its arguments
        return "", json.dumps(dict(request.arguments), ensure_ascii=False, indent=2)[:4000]
    if not diff:
        return "", "no change"
    return diff, "new file" if diff.startswith("--- /dev/null") else ""


def preview(request: ApprovalRequest, workspace: Path, width: int, plain: bool = False) -> RenderableType:
    """What will run: a panel with the command, or the path and the diff of an edit (in plain output,
    `TERM=dumb`, the same without the frame: no box-drawing characters)."""
    command = command_of(request)
    title = Text(f" {request.tool} ", style="bold")

    def frame(body: RenderableType, width: int) -> RenderableType:
        if plain:
            return Group(Text(f"[{request.tool}]", style="bold"), body)
        return Panel(body, title=title, title_align="left", border_style="yellow", width=width)

    if command is not None:
        body: RenderableType = Text(sanitize(command, sequences="escape"), style="bold")
        extra = {k: v for k, v in request.arguments.items() if k != "command"}
        if extra:
            body = Group(body, Text(sanitize(json.dumps(extra, ensure_ascii=False), sequences="escape"), style="dim"))
        return frame(body, min(width, 120))
    if request.kind == "edit":
        diff, note = edit_preview(request, workspace)
        shown = request.arguments.get("path") or request.path
        parts: list[RenderableType] = [Text(sanitize(str(shown), sequences="escape"), style="bold")] if shown else []
        if note:
            parts.append(Text(sanitize(note, sequences="escape"), style="dim"))
        if diff:
            parts.append(diff_text(diff, PREVIEW_LINES, indent="", headers=False))
        return frame(Group(*parts), min(width, 160))
    body = Text(sanitize(json.dumps(dict(request.arguments), ensure_ascii=False, indent=2)[:4000], sequences="escape"))
    return frame(body, min(width, 120))


# -- asking ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    value: str
    key: str
    label: str


def options_for(request: ApprovalRequest) -> list[Option]:
    """The answers offered for a request."""
    command = command_of(request)
    opts = [Option("once", "y", "Yes")]
    if command is not None:
        opts.append(Option("command", "a", "Yes, and don't ask again this session for this exact command"))
        if not has_shell_operators(command):
            opts.append(Option("prefix", "p", "Yes, and don't ask again for commands starting with…"))
    elif request.path is not None:
        opts.append(Option("file", "a", "Yes, and don't ask again this session for edits to this file"))
    else:
        opts.append(Option("call", "a", "Yes, and don't ask again this session for this exact call"))
    opts.append(Option("no", "n", "No, and tell the model what to do instead (esc: no, without a reason)"))
    return opts


async def choose(question: str, options: list[Option]) -> str | None:
    """A one-keystroke menu (arrows + Enter, the letter, or the number); None on Esc, "interrupt" on Ctrl-C."""
    from prompt_toolkit.application import Application
    from prompt_toolkit.formatted_text import StyleAndTextTuples
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
    from prompt_toolkit.layout import FormattedTextControl, Layout, Window

    selected = [0]
    kb = KeyBindings()

    def text() -> StyleAndTextTuples:
        out: StyleAndTextTuples = [("bold", f"{question}\n")]
        for i, opt in enumerate(options):
            mark = "❯" if i == selected[0] else " "
            style = "reverse" if i == selected[0] else ""
            out.append(("", f" {mark} "))
            out.append((style, f"{i + 1}. {opt.label}"))
            out.append(("fg:ansibrightblack", f" ({opt.key})\n"))
        return out

    @kb.add("up")
    @kb.add("c-p")
    def _up(event: KeyPressEvent) -> None:
        selected[0] = (selected[0] - 1) % len(options)

    @kb.add("down")
    @kb.add("c-n")
    @kb.add("tab")
    def _down(event: KeyPressEvent) -> None:
        selected[0] = (selected[0] + 1) % len(options)

    @kb.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        event.app.exit(result=options[selected[0]].value)

    @kb.add("escape", eager=True)
    def _esc(event: KeyPressEvent) -> None:
        event.app.exit(result=None)

    @kb.add("c-c")
    def _interrupt(event: KeyPressEvent) -> None:
        event.app.exit(result="interrupt")

    def bind(key: str, value: str) -> None:
        @kb.add(key)
        def _pick(event: KeyPressEvent) -> None:
            event.app.exit(result=value)

    for i, opt in enumerate(options):
        bind(opt.key, opt.value)
        bind(str(i + 1), opt.value)

    app: Application[str | None] = Application(
        layout=Layout(Window(FormattedTextControl(text, show_cursor=False), dont_extend_height=True)),
        key_bindings=kb,
        full_screen=False,
        erase_when_done=True,
        mouse_support=False,
    )
    return await app.run_async()


async def ask_text(message: str, default: str = "") -> str | None:
    """A one-line text prompt; None when cancelled with Ctrl-C, Ctrl-D or Esc."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

    kb = KeyBindings()

    @kb.add("escape", eager=True)
    def _esc(event: KeyPressEvent) -> None:
        event.app.exit(exception=KeyboardInterrupt)

    session: PromptSession[str] = PromptSession(key_bindings=kb)
    try:
        return await session.prompt_async(message, default=default)
    except (KeyboardInterrupt, EOFError):
        return None


class Approver:
    """The agent's `approve` callback for the terminal.

    `suspend`/`resume` take the turn's live lines and key listener off the terminal while the question is
    on screen; `interrupt` is called (soon, not inside the agent's task) when the user presses Ctrl-C.
    Questions are asked one at a time.
    """

    def __init__(
        self,
        console: Console,
        workspace: Path,
        rules: SessionRules,
        *,
        suspend: Callable[[], None] = lambda: None,
        resume: Callable[[], None] = lambda: None,
        interrupt: Callable[[], None] = lambda: None,
        choose_fn: Callable[[str, list[Option]], Awaitable[str | None]] = choose,
        ask_fn: Callable[[str, str], Awaitable[str | None]] = ask_text,
        plain: bool = False,
    ) -> None:
        self.console = console
        self.plain = plain
        self.previewed: set[str] = set()
        """Call ids whose diff the question showed (the result does not print it a second time)."""
        self.refused: set[str] = set()
        """Call ids refused at the question, which said so ("✗ not allowed: reason"): no second line."""
        self.workspace = workspace
        self.rules = rules
        self.suspend = suspend
        self.resume = resume
        self.interrupt = interrupt
        self.choose_fn = choose_fn
        self.ask_fn = ask_fn
        self._lock = asyncio.Lock()

    def _say(self, text: str, style: str) -> None:
        self.console.print(Text(text, style=style), highlight=False)

    async def __call__(self, request: ApprovalRequest) -> Approval:
        if self.rules.match(request) is not None:
            return Approval(True)
        async with self._lock:  # one question on the terminal at a time
            if self.rules.match(request) is not None:  # allowed while this one waited
                return Approval(True)
            self.suspend()
            try:
                return await self._ask(request)
            finally:
                self.resume()

    async def _ask(self, request: ApprovalRequest) -> Approval:
        self.console.print()
        self.console.print(preview(request, self.workspace, self.console.size.width, self.plain))
        if request.kind == "edit" and edit_preview(request, self.workspace)[0]:
            self.previewed.add(request.call_id)
        command = command_of(request)
        question = (
            "Run this command?"
            if command is not None
            else (f"Allow {request.tool}?" if request.kind != "edit" else "Make this change?")
        )
        options = options_for(request)
        while True:
            answer = await self.choose_fn(question, options)
            if answer == "interrupt":
                self._say("  ✗ not allowed; interrupting the turn", "red")
                asyncio.get_running_loop().call_soon(self.interrupt)
                return Approval(False, "the user interrupted the turn")
            if answer == "once":
                self._say("  ✓ allowed once", "green")
                return Approval(True)
            if answer == "command" and command is not None:
                self.rules.commands.add(command)
                self._say("  ✓ allowed; this exact command won't be asked about again this session", "green")
                return Approval(True, remember=remember_rule(request, answer))
            if answer == "file" and request.path is not None:
                self.rules.files.add(request.path)
                self._say(f"  ✓ allowed; edits to {request.arguments.get('path')} won't be asked about again", "green")
                return Approval(True, remember=remember_rule(request, answer))
            if answer == "call":
                self.rules.calls.add(call_key(request))
                self._say("  ✓ allowed; this exact call won't be asked about again this session", "green")
                return Approval(True)
            if answer == "prefix" and command is not None:
                prefix = await self._ask_prefix(command)
                if prefix is None:
                    continue  # back to the menu
                self.rules.prefixes.add(prefix)
                self._say(f"  ✓ allowed; commands starting with {prefix!r} won't be asked about again", "green")
                return Approval(True, remember=remember_rule(request, answer, prefix))
            reason = ""
            if answer is not None:
                typed = await self.ask_fn("  Tell the model why or what to do instead (Enter to skip): ", "")
                reason = (typed or "").strip()
            self._say("  ✗ not allowed" + (f": {reason}" if reason else ""), "red")
            self.refused.add(request.call_id)
            return Approval(False, reason)

    def shown(self, call_id: str) -> bool:
        """True when the question showed this call's diff or its refusal (the turn's view does not repeat it)."""
        return call_id in self.previewed or call_id in self.refused

    async def _ask_prefix(self, command: str) -> str | None:
        default = suggest_prefix(command)
        while True:
            text = await self.ask_fn("  Allow commands starting with: ", default)
            if text is None:
                return None
            problem = prefix_problem(text, command)
            if problem is None:
                return text.strip()
            self._say(f"  {problem}", "yellow")
            default = text


def describe_rules(rules: SessionRules) -> list[str]:
    """Human-readable lines listing the session's rules (for /permissions)."""
    out = [f"command: {c}" for c in sorted(rules.commands)]
    out += [f"commands starting with: {p}" for p in sorted(rules.prefixes)]
    out += [f"file: {f}" for f in sorted(rules.files)]
    out += [f"call: {c.split(chr(0), 1)[0]} {c.split(chr(0), 1)[1]}" for c in sorted(rules.calls)]
    return out
