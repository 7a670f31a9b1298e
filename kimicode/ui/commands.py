"""Slash commands of the interactive session (`/help`, `/clear`, `/model`, …).

Each command is an async handler taking the session and the rest of the line. Commands that depend on
features still being built (`/compact`, `/sessions`, `/resume`) look for them at run time and say so in
one line when they are not there yet.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from kimicode.agent.permissions import MODES
from kimicode.ui.approvals import describe_rules
from kimicode.ui.completion import CommandInfo
from kimicode.ui.format import tokens

if TYPE_CHECKING:
    from kimicode.ui.app import Session

Handler = Callable[["Session", str], Awaitable[None]]

EFFORTS = ("low", "high", "max")
_COMMAND_WORD = re.compile(r"^/([A-Za-z][\w-]*)(?:\s|$)")


@dataclass(frozen=True)
class Command:
    """A slash command: its name, a one-line summary, an argument hint, the handler, argument choices."""

    name: str
    summary: str
    handler: Handler
    usage: str = ""
    choices: Callable[[Session], Sequence[str]] | None = None


def looks_like_command(text: str) -> bool:
    """`/word …` is a command; `/usr/bin/env is broken` (a path) is a message."""
    return _COMMAND_WORD.match(text.strip()) is not None


async def dispatch(session: Session, line: str) -> None:
    """Run the command on `line` (which `looks_like_command`)."""
    stripped = line.strip()
    name, _, arg = stripped[1:].partition(" ")
    name = name.lower()
    command = COMMANDS.get(name) or COMMANDS.get(ALIASES.get(name, ""))
    if command is None:
        close = difflib.get_close_matches(name, [*COMMANDS, *ALIASES], n=1, cutoff=0.5)
        hint = f" Did you mean /{ALIASES.get(close[0], close[0])}?" if close else ""
        session.say(f"Unknown command /{name}.{hint} Type /help for the list.", "yellow")
        return
    await command.handler(session, arg.strip())


def command_infos(session: Session) -> dict[str, CommandInfo]:
    """Names, summaries and argument choices for completion."""

    def choices_of(cmd: Command) -> Callable[[], Sequence[str]] | None:
        if cmd.choices is None:
            return None
        fn = cmd.choices
        return lambda: fn(session)

    return {name: CommandInfo(name, cmd.summary, choices_of(cmd)) for name, cmd in COMMANDS.items()}


# -- handlers -------------------------------------------------------------------------------------

KEYS_HELP = [
    ("Enter", "send the message"),
    ("Ctrl-J, Esc Enter", "new line (pasted text keeps its newlines)"),
    ("Tab", "complete /commands and @paths"),
    ("@path", "attach a file (or a directory listing) to the message"),
    ("↑ ↓, Ctrl-R", "previous messages, search them"),
    ("Shift-Tab", "cycle the permission mode: default → accept-edits → yolo"),
    ("Esc, Ctrl-C", "interrupt the agent"),
    ("Ctrl-C twice, Ctrl-D", "exit"),
]


async def cmd_help(session: Session, arg: str) -> None:
    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for cmd in COMMANDS.values():
        table.add_row(f"/{cmd.name}" + (f" {cmd.usage}" if cmd.usage else ""), cmd.summary)
    session.console.print(table)
    keys = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    keys.add_column(style="bold", no_wrap=True)
    keys.add_column(style="dim")
    for key, what in KEYS_HELP:
        keys.add_row(key, what)
    session.console.print()
    session.console.print(keys)


async def cmd_exit(session: Session, arg: str) -> None:
    session.exit_requested = True


async def cmd_clear(session: Session, arg: str) -> None:
    had_rules = bool(describe_rules(session.rules))
    await session.new_conversation()
    session.say(f"Started a new session ({session.agent.session_id}).", "green")
    if had_rules:
        session.say("The approvals you gave for the previous session were forgotten.", "dim")


async def cmd_model(session: Session, arg: str) -> None:
    agent = session.agent
    if not arg:
        session.say(
            f"Model: {agent.endpoint.model} at {agent.endpoint.base_url} "
            f"(context window {tokens(agent.context_window)}). Change it with /model NAME."
        )
        return
    if any(c.isspace() for c in arg):
        session.say("A model name has no spaces: /model NAME", "yellow")
        return
    agent.set_model(arg)
    session.say(f"Model set to {arg} (context window {tokens(agent.context_window)}); the history is kept.", "green")


async def cmd_thinking(session: Session, arg: str) -> None:
    agent = session.agent
    if not arg:
        session.say(f"Reasoning effort: {agent.thinking or 'the model default'}. Set it with /thinking low|high|max.")
        return
    if arg not in EFFORTS:
        session.say(f"/thinking takes low, high or max (got {arg!r}).", "yellow")
        return
    agent.set_thinking(arg)
    session.say(f"Reasoning effort set to {arg}.", "green")


async def cmd_permissions(session: Session, arg: str) -> None:
    agent = session.agent
    if arg == "clear":
        session.rules.clear()
        session.say("Forgot the approvals given this session.", "green")
        return
    if arg:
        if arg not in MODES:
            session.say(f"/permissions takes {', '.join(MODES)} or clear (got {arg!r}).", "yellow")
            return
        agent.permission_mode = arg
        session.say(f"Permission mode: {arg}.", "green")
        return
    explain = {
        "default": "reads run; file edits and commands ask first",
        "accept-edits": "reads and edits inside the workspace run; commands and outside edits ask",
        "yolo": "everything runs without asking",
    }
    session.say(f"Permission mode: {agent.permission_mode} ({explain.get(agent.permission_mode, '')}).")
    rules = describe_rules(session.rules)
    if rules:
        session.say("Allowed for this session:")
        for rule in rules:
            session.say(f"  {rule}", "dim")
    session.say(
        f"Change it with /permissions {'|'.join(MODES)} or Shift-Tab; /permissions clear forgets "
        "the session's approvals.",
        "dim",
    )


async def cmd_reasoning(session: Session, arg: str) -> None:
    if arg not in ("show", "hide"):
        state = "shown" if session.settings.show_reasoning else "hidden"
        session.say(f"Reasoning is {state}. Use /reasoning show or /reasoning hide.")
        return
    session.settings.show_reasoning = arg == "show"
    problem = session.settings.save(session.home)
    session.say(f"Reasoning will be {'shown' if arg == 'show' else 'hidden'}.", "green")
    if problem:
        session.say(problem, "yellow")


def estimate_tokens(value: Any) -> int:
    """About 4 characters per token: a rough figure until a real tokenizer is wired in."""
    if value is None:
        return 0
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return (len(text) + 3) // 4


def context_breakdown(messages: Sequence[dict[str, Any]], tool_schemas: Any) -> list[tuple[str, int]]:
    """Estimated tokens per part of the context: system prompt, tools, user, assistant, tool results."""
    parts = {
        "system prompt": 0,
        "tool definitions": estimate_tokens(tool_schemas),
        "your messages": 0,
        "assistant messages": 0,
        "tool calls": 0,
        "tool results": 0,
    }
    for msg in messages:
        role = msg.get("role")
        if role == "system":
            parts["system prompt"] += estimate_tokens(msg.get("content"))
        elif role == "user":
            parts["your messages"] += estimate_tokens(msg.get("content"))
        elif role == "assistant":
            parts["assistant messages"] += estimate_tokens(msg.get("content")) + estimate_tokens(
                msg.get("reasoning_content") or msg.get("reasoning")
            )
            parts["tool calls"] += estimate_tokens(msg.get("tool_calls"))
        elif role == "tool":
            parts["tool results"] += estimate_tokens(msg.get("content"))
    return list(parts.items())


LABELS = {
    "system": "system prompt",
    "tools": "tool definitions",
    "user": "your messages",
    "assistant": "assistant messages",
    "reasoning": "reasoning",
    "tool_calls": "tool calls",
    "tool_results": "tool results",
}


def breakdown_rows(session: Session) -> tuple[list[tuple[str, int]], str]:
    """Rows of (part, tokens) and how they were obtained: the agent's context accounting when it has one,
    else characters ÷ 4 per role."""
    agent = session.agent
    method = getattr(agent, "context_breakdown", None)
    if callable(method):
        try:
            data = method().as_dict()
            rows = [(LABELS.get(k, k.replace("_", " ")), int(v)) for k, v in data.items() if k != "total"]
            return rows, "estimate, calibrated on the server's counts"
        except Exception:
            pass
    return context_breakdown(agent.messages, agent.tools.schemas()), "estimate: characters ÷ 4"


async def cmd_context(session: Session, arg: str) -> None:
    agent = session.agent
    rows, how = breakdown_rows(session)
    total = sum(n for _, n in rows)
    window = max(1, agent.context_window)
    table = Table(title=f"Context of the next request ({how})", title_justify="left", box=None, padding=(0, 2, 0, 0))
    table.add_column("part")
    table.add_column("tokens", justify="right")
    table.add_column("of window", justify="right")
    for name, n in rows:
        table.add_row(name, f"~{tokens(n)}", f"{100 * n / window:.1f}%")
    table.add_row(
        Text("total", style="bold"),
        Text(f"~{tokens(total)}", style="bold"),
        Text(f"{100 * total / window:.1f}%", style="bold"),
    )
    session.console.print(table)
    stats = session.stats
    if not stats.context_estimated:
        session.say(
            f"After the last step: {tokens(stats.context_used)} of {tokens(window)} "
            f"({100 * stats.context_used / window:.0f}%).",
            "dim",
        )
    session.say(f"Window: {tokens(window)} tokens ({agent.endpoint.model}).", "dim")


async def cmd_cost(session: Session, arg: str) -> None:
    usage = session.agent.usage
    prompt, completion, cached = usage["prompt_tokens"], usage["completion_tokens"], usage["cached_tokens"]
    share = f" ({100 * cached / prompt:.0f}% of input)" if prompt else ""
    session.say(
        f"This session: {prompt:,} input tokens, of which {cached:,} cached{share}; {completion:,} output tokens."
    )
    session.say("Cost: not shown; prices are not configured yet.", "dim")


async def cmd_compact(session: Session, arg: str) -> None:
    agent = session.agent
    compact = getattr(agent, "compact", None)
    if not callable(compact):
        session.say("/compact is not available in this build yet.", "yellow")
        return
    session.say("Compacting the conversation… (Esc or Ctrl-C cancels)", "dim")
    previous = getattr(agent, "on_event", None)
    agent.on_event = session.on_side_event
    try:
        outcome = await session.run_cancellable(compact(arg or None))
    except asyncio.CancelledError:
        session.say("Compaction cancelled; the conversation is unchanged.", "yellow")
        return
    except Exception as exc:
        session.say(f"Compaction failed: {exc}. The conversation is unchanged.", "red")
        return
    finally:
        agent.on_event = previous
    if outcome is None:
        session.say("Nothing to compact yet.")
        return
    before, after = getattr(outcome, "tokens_before", 0), getattr(outcome, "tokens_after", 0)
    folded = getattr(outcome, "summarized", 0)
    session.say(f"Compacted {folded} messages into a summary: ~{tokens(before)} → ~{tokens(after)} tokens.", "green")
    if getattr(outcome, "fallback", False):
        session.say(
            f"The summary request failed ({getattr(outcome, 'error', '') or 'no details'}); "
            "a simpler summary was kept instead.",
            "yellow",
        )


def _session_lister() -> Callable[..., Any] | None:
    try:
        from kimicode.session import log
    except ImportError:
        return None
    for name in ("list_sessions", "sessions"):
        fn: Callable[..., Any] | None = getattr(log, name, None)
        if callable(fn):
            return fn
    return None


async def cmd_sessions(session: Session, arg: str) -> None:
    lister = _session_lister()
    if lister is None:
        session.say("/sessions is not available in this build yet.", "yellow")
        return
    try:
        items = list(lister(session.home / "sessions"))
    except Exception as exc:
        session.say(f"Could not list sessions: {exc}", "red")
        return
    if not items:
        session.say("No saved sessions.")
        return
    for item in items[:20]:
        session.say(f"  {item}")


async def cmd_resume(session: Session, arg: str) -> None:
    if not callable(getattr(type(session.agent), "resume", None)):
        session.say("/resume is not available in this build yet.", "yellow")
        return
    if not arg:
        session.say("Usage: /resume SESSION_ID (see /sessions).", "yellow")
        return
    try:
        await session.resume_session(arg)
    except Exception as exc:
        session.say(f"Could not resume {arg}: {exc}", "red")
        return
    session.say(f"Resumed session {session.agent.session_id} ({len(session.agent.messages)} messages).", "green")


async def cmd_init(session: Session, arg: str) -> None:
    from kimicode.prompts import load_prompt

    try:
        prompt = load_prompt("init.md")
    except RuntimeError as exc:
        session.say(str(exc), "red")
        return
    if arg:
        prompt += f"\n\nAdditional instructions from the user: {arg}"
    await session.run_turn(prompt, echo="/init: asking the agent to write AGENTS.md")


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command("help", "show commands and keys", cmd_help),
        Command("clear", "start a new session (the conversation is forgotten)", cmd_clear),
        Command("compact", "summarise the conversation to free context", cmd_compact, "[instructions]"),
        Command("context", "what fills the context window", cmd_context),
        Command("cost", "tokens used this session", cmd_cost),
        Command("model", "show or switch the model", cmd_model, "[name]"),
        Command("thinking", "reasoning effort", cmd_thinking, "low|high|max", lambda s: EFFORTS),
        Command(
            "permissions",
            "show or set the permission mode",
            cmd_permissions,
            "[mode|clear]",
            lambda s: (*MODES, "clear"),
        ),
        Command(
            "reasoning", "show or hide the model's reasoning", cmd_reasoning, "show|hide", lambda s: ("show", "hide")
        ),
        Command("sessions", "list saved sessions", cmd_sessions),
        Command("resume", "continue a saved session", cmd_resume, "[id]"),
        Command("init", "have the agent write AGENTS.md for this repository", cmd_init, "[notes]"),
        Command("exit", "leave kimicode", cmd_exit),
    )
}
ALIASES = {"quit": "exit", "q": "exit", "new": "clear"}
