"""Slash commands of the interactive session (`/help`, `/clear`, `/model`, …).

Each built-in command is an async handler taking the session and the rest of the line. Custom commands
(Markdown files in `.kimicode/commands/` and `KIMICODE_HOME/commands/`, see `kimicode.commands`) are
dispatched after the built-ins: their rendered text is sent as the prompt. A built-in command (or alias)
wins over a custom command of the same name, and /help says which files are hidden that way.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from kimicode.agent.costs import agent_prices
from kimicode.config.choices import EFFORTS
from kimicode.config.pricing import describe_prices, unknown_price_hint
from kimicode.permissions.engine import MODES
from kimicode.session.store import SessionError, find_session, list_sessions, one_line
from kimicode.ui.approvals import describe_rules
from kimicode.ui.bangcmds import expand_bangs
from kimicode.ui.branches import cmd_branches
from kimicode.ui.checkpoint_cmds import cmd_diff, cmd_fork, cmd_rewind, cmd_undo
from kimicode.ui.claude_cmds import CLAUDE_COMMANDS, rule_lines
from kimicode.ui.compact_cmd import cmd_compact
from kimicode.ui.completion import Choice, CommandInfo
from kimicode.ui.format import money, tokens
from kimicode.ui.login import cmd_login
from kimicode.ui.model_cmds import cmd_model, cmd_prompt, model_choices
from kimicode.ui.toolbar import short_path
from kimicode.ui.trust_cmds import cmd_skills, cmd_trust

if TYPE_CHECKING:
    from kimicode.commands import CustomCommand
    from kimicode.ui.app import Session

Handler = Callable[["Session", str], Awaitable[None]]

_COMMAND_WORD = re.compile(r"^/([A-Za-z][\w-]*(?::[\w-]+)*)(?:\s|$)")


@dataclass(frozen=True)
class Command:
    """A slash command: its name, a one-line summary, an argument hint, the handler, argument choices."""

    name: str
    summary: str
    handler: Handler
    usage: str = ""
    choices: Callable[[Session], Sequence[Choice]] | None = None


def looks_like_command(text: str, custom: Mapping[str, object] | None = None) -> bool:
    """`/word …` is a command; `/usr/bin/env is broken` (a path) is a message. `/git:commit` and any
    name in `custom` (custom commands, which may start with a digit) are commands too."""
    stripped = text.strip()
    if _COMMAND_WORD.match(stripped) is not None:
        return True
    word = stripped[1:].split(None, 1)[0] if stripped.startswith("/") and len(stripped) > 1 else ""
    return bool(word) and custom is not None and find_custom(custom, word) is not None


def builtin(name: str) -> Command | None:
    """The built-in command called `name` (or an alias of it)."""
    name = name.lower()
    return COMMANDS.get(name) or COMMANDS.get(ALIASES.get(name, ""))


def find_custom(custom: Mapping[str, Any], name: str) -> Any:
    """The custom command `name` (exact, else ignoring case), or None."""
    if name in custom:
        return custom[name]
    lowered = {k.lower(): v for k, v in custom.items()}
    return lowered.get(name.lower())


async def dispatch(session: Session, line: str) -> None:
    """Run the command on `line` (which `looks_like_command`): a built-in, else a custom command."""
    stripped = line.strip()
    raw, _, arg = stripped[1:].partition(" ")
    command = builtin(raw)
    if command is not None:
        await command.handler(session, arg.strip())
        return
    custom = session.custom_commands()
    found: CustomCommand | None = find_custom(custom, raw)
    if found is not None:
        await run_custom(session, found, arg)
        return
    name = raw.lower()
    close = difflib.get_close_matches(name, [*COMMANDS, *ALIASES, *custom], n=1, cutoff=0.5)
    hint = f" Did you mean /{ALIASES.get(close[0], close[0])}?" if close else ""
    session.say(f"Unknown command /{raw}.{hint} Type /help for the list.", "yellow")


async def run_custom(session: Session, command: CustomCommand, arg: str) -> None:
    """Send a custom command's text (with the arguments filled in) as the prompt."""
    prompt = command.render(arg)
    if not prompt.strip():
        session.say(f"/{command.name} has no text to send ({command.path}).", "yellow")
        return
    from kimicode.extensions.slash import grant, revoke

    agent = session.agent  # its `allowed-tools` hold for this turn only (deny and ask rules still win)
    agent.policy, added, problems = grant(agent.policy, command.allowed_tools, f"/{command.name}")
    for problem in problems:
        session.say(problem, "yellow")
    back = agent.model_config.name if command.model and command.model != agent.endpoint.model else None
    try:
        if command.scope != "skill":  # Claude Code's !`cmd` lines: run (permission-checked), output in place
            prompt = await expand_bangs(session, command.name, prompt)
        if back is not None:  # its `model` answers this turn only (a switch both ways, docs/models.md)
            agent.set_model(command.model)
        await session.run_turn(prompt, echo=f"/{command.name}: {custom_echo(command, arg)}")
    finally:
        agent.policy = revoke(agent.policy, added)
        if back is not None and not agent.busy:
            agent.set_model(back)


def custom_echo(command: CustomCommand, arg: str) -> str:
    """What a custom command's echo line says: its description, with `$ARGUMENTS`/`$1` filled in like the
    text it sends (a description taken from the text's first line would otherwise show placeholders)."""
    description = command.description or "custom command"
    if "$" not in description:
        return description
    filled = dataclasses.replace(command, template=description).render(arg) if arg else ""
    if not arg or not filled:
        filled = re.sub(r"\$(?:ARGUMENTS|\d+)", "…", description)
    return one_line(filled, 80)


def command_infos(session: Session) -> dict[str, CommandInfo]:
    """Names, summaries and argument choices for completion (custom commands too, unless hidden by a
    built-in of the same name)."""

    def choices_of(cmd: Command) -> Callable[[], Sequence[Choice]] | None:
        if cmd.choices is None:
            return None
        fn = cmd.choices
        return lambda: fn(session)

    infos = {
        name: CommandInfo(name, f"{custom.description} ({custom.scope})".strip())
        for name, custom in session.custom_commands().items()
        if builtin(name) is None
    }
    infos.update({name: CommandInfo(name, cmd.summary, choices_of(cmd)) for name, cmd in COMMANDS.items()})
    return infos


# -- handlers -------------------------------------------------------------------------------------

KEYS_HELP = [
    ("Enter", "send the message"),
    ("Ctrl-J, Esc Enter", "new line (pasted text keeps its newlines)"),
    ("Tab", "complete /commands and @paths"),
    ("@path", "attach a file (or a directory listing) to the message"),
    ("↑ ↓, Ctrl-R", "previous messages, search them"),
    ("Shift-Tab", "cycle the permission mode: default → accept-edits → plan → yolo"),
    ("Esc, Ctrl-C", "interrupt the agent"),
    ("Esc Esc", "on an empty prompt: go back to an earlier turn (/rewind)"),
    ("Ctrl-O", "show the last tool result (or the running command's output) in full"),
    ("Ctrl-S", "while a turn runs: send what you typed into it now instead of after it"),
    ("!command", "run a shell command yourself; its output goes to the model with your next message"),
    ("Ctrl-C twice, Ctrl-D", "exit"),
]


async def cmd_help(session: Session, arg: str) -> None:
    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for cmd in COMMANDS.values():
        table.add_row(Text(f"/{cmd.name}" + (f" {cmd.usage}" if cmd.usage else "")), Text(cmd.summary))
    session.console.print(table)
    keys = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    keys.add_column(style="bold", no_wrap=True)
    keys.add_column(style="dim")
    for key, what in KEYS_HELP:
        keys.add_row(key, what)
    custom = session.custom_commands()
    if custom:
        session.console.print()
        where = (
            f".kimicode/commands/, .claude/commands/, {short_path(session.home / 'commands')}/, "
            "~/.claude/commands/, plugins, skills"
        )
        session.console.print(Text(f"Custom commands ({where}):", style="bold"))
        mine = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
        mine.add_column(style="bold cyan", no_wrap=True)
        mine.add_column()
        mine.add_column(style="dim")
        hidden: list[str] = []
        for name, mine_cmd in custom.items():
            if builtin(name) is not None:
                hidden.append(name)
                continue
            hint = f" {mine_cmd.argument_hint}" if mine_cmd.argument_hint else ""
            mine.add_row(Text(f"/{name}{hint}"), Text(mine_cmd.description), Text(mine_cmd.scope))
        session.console.print(mine)
        for name in hidden:
            session.say(
                f"/{name} ({_shown_path(custom[name].path, session)}) is not available: the built-in /{name} "
                "wins; rename the file to use it.",
                "yellow",
            )
    session.console.print()
    session.console.print(keys)


def _shown_path(path: Path, session: Session) -> str:
    try:
        return path.relative_to(session.workspace).as_posix()
    except ValueError:
        return short_path(path, 60)


async def cmd_exit(session: Session, arg: str) -> None:
    session.exit_requested = True


async def cmd_clear(session: Session, arg: str) -> None:
    had_rules = bool(describe_rules(session.rules))
    await session.new_conversation()
    session.say(f"Started a new session ({session.agent.session_id}).", "green")
    if had_rules:
        session.say("The approvals you gave for the previous session were forgotten.", "dim")


async def cmd_thinking(session: Session, arg: str) -> None:
    agent = session.agent
    if not arg:
        effort = session.effort()
        if agent.thinking:
            now = agent.thinking
        elif effort:
            now = f"{effort} (the model's default)"
        else:
            now = "the model's default (none sent)"
        session.say(f"Reasoning effort: {now}. Set it with /thinking low|high|max.")
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
        agent.forget_session_rules()
        session.say("Forgot the approvals given this session.", "green")
        return
    if arg:
        if arg not in MODES:
            session.say(f"/permissions takes {', '.join(MODES)} or clear (got {arg!r}).", "yellow")
            return
        agent.set_permission_mode(arg)
        session.say(f"Permission mode: {arg}.", "green")
        return
    explain = {
        "default": "reads run; file edits and commands ask first",
        "accept-edits": "reads and edits inside the workspace run; commands and outside edits ask",
        "plan": "nothing is changed: reads run, edits are refused, commands ask; the agent proposes a plan",
        "yolo": "everything runs without asking",
    }
    session.say(f"Permission mode: {agent.permission_mode} ({explain.get(agent.permission_mode, '')}).")
    listed = rule_lines(agent.policy.rules)  # deny, ask, allow: each rule with the file it came from
    if listed:
        session.say("Rules (deny first, then ask, then allow):")
        for line in listed:
            session.say(line, "dim")
    if agent.sandbox is not None:
        which = "commands that run without asking run" if agent.sandbox.auto else "bash runs"
        session.say(
            f"{which} in the sandbox (read-only, or the workspace writable; outside it only system "
            "directories and toolchains are visible).",
            "dim",
        )
    elif agent.sandbox_warning:
        session.say(f"no sandbox: {agent.sandbox_warning}", "dim")
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


CALIBRATION = {
    "none": "estimate, not yet calibrated (the server has not counted a request of this session yet)",
    "server": "estimate, calibrated on the server's counts",
    "restored": "estimate, calibrated on the server's counts in an earlier session (same server)",
    "probe": "estimate, calibrated on the server's count of the request before it was sent",
}


def calibration_label(source: str) -> str:
    """How the /context estimate was obtained, truthfully: calibrated only once a count exists."""
    return CALIBRATION.get(source, "estimate")


def breakdown_rows(session: Session) -> tuple[list[tuple[str, int]], str]:
    """Rows of (part, tokens) and how they were obtained: the agent's context accounting, else (if that
    fails) characters ÷ 4 per role."""
    agent = session.agent
    try:
        data = agent.context_breakdown().as_dict()
        rows = [(LABELS.get(k, k.replace("_", " ")), int(v)) for k, v in data.items() if k != "total"]
        return rows, calibration_label(agent.context.calibration_source)
    except Exception:
        return context_breakdown(agent.messages, agent.tools.schemas()), "estimate: characters ÷ 4"


WINDOW_SOURCES = {
    "flag": "from --context-window",
    "config": "from context_window in the config",
    "server": "as the server reports it",
    "known": "known for this model",
    "default": "kimicode's default: the server does not say",
    "learnt": "learnt from the server's context-length error",
}


async def cmd_context(session: Session, arg: str) -> None:
    agent = session.agent
    rows, how = breakdown_rows(session)
    total = sum(n for _, n in rows)
    window = max(1, getattr(agent, "effective_window", agent.context_window))
    # a short title (a table's title wraps to the table's width); how it was counted goes below
    table = Table(title="Context of the next request", title_justify="left", box=None, padding=(0, 2, 0, 0))
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
    session.say(f"Counted as: {how}.", "dim")
    stats = session.stats
    if not stats.context_estimated:
        session.say(
            f"After the last step: {tokens(stats.context_used)} of {tokens(window)} "
            f"({100 * stats.context_used / window:.0f}%).",
            "dim",
        )
    source = WINDOW_SOURCES.get(getattr(agent, "window_source", ""), "")
    reserve = agent.context.budget.reserve
    session.say(
        f"Window: {tokens(window)} tokens ({agent.endpoint.model}{', ' + source if source else ''}); "
        f"{tokens(reserve)} kept for the answer.",
        "dim",
    )


async def cmd_cost(session: Session, arg: str) -> None:
    agent = session.agent
    usage = agent.usage
    prompt, completion, cached = usage["prompt_tokens"], usage["completion_tokens"], usage["cached_tokens"]
    share = f" ({100 * cached / prompt:.0f}% of input)" if prompt else ""
    session.say(
        f"This session: {prompt:,} input tokens, of which {cached:,} cached{share}; {completion:,} output tokens "
        "(subagents included)."
    )
    cost = session.cost()
    name = agent.model_config.name
    prices, source = agent_prices(agent)
    if cost is None:
        why = "the server reported no token usage" if prices else unknown_price_hint(name, agent.home)
        session.say(f"Cost: not shown: {why}", "dim")
        return
    session.say(f"Cost: about {money(cost)} ({name} prices per million tokens: {describe_prices(prices, source)}).")


SESSIONS_SHOWN = 20


def _sessions(session: Session) -> list[Any]:
    """The saved sessions of this workspace, most recently used first."""
    return list_sessions(session.agent.home, workspace=session.workspace)[:SESSIONS_SHOWN]


def session_choices(session: Session) -> list[Choice]:
    """Session ids for `/resume` completion, each with its first prompt."""
    try:
        found = _sessions(session)
    except OSError:
        return []
    return [(info.id, one_line(info.first_prompt, 40) or "(no prompt)") for info in found]


async def cmd_sessions(session: Session, arg: str) -> None:
    try:
        items = _sessions(session)
    except OSError as exc:
        session.say(f"Could not list sessions: {exc.strerror or exc}", "red")
        return
    if not items:
        session.say(f"No saved sessions in {session.workspace}.")
        return
    table = Table(box=None, padding=(0, 2, 0, 0), title_justify="left",
                  title=f"Sessions of {session.workspace}, most recent first")  # fmt: skip
    table.add_column("id", no_wrap=True)
    table.add_column("started", no_wrap=True)
    table.add_column("prompts", justify="right")
    table.add_column("first prompt")
    current = session.agent.session_id
    for info in items:
        mark = " ◀ current" if info.id == current else ""
        table.add_row(
            Text(info.id, style="bold cyan" if mark else "cyan"),
            info.started.astimezone().strftime("%Y-%m-%d %H:%M"),
            str(info.turns),
            one_line(info.first_prompt, 60) + mark,
        )
    session.console.print(table)
    session.say("/resume ID (or a unique prefix) switches to one; `kimicode sessions list` shows all.", "dim")


async def cmd_resume(session: Session, arg: str) -> None:
    if not arg:
        await cmd_sessions(session, "")
        return
    try:
        target = find_session(session.agent.home, arg).stem
    except SessionError as exc:
        session.say(f"Could not resume {arg}: {exc}", "red")
        return
    if target == session.agent.session_id:
        session.say(f"Already in session {target}.")
        return
    try:
        await session.resume_session(target)
    except ValueError as exc:  # SessionError, or settings the session can't be resumed with
        session.say(f"Could not resume {arg}: {exc}", "red")
        return
    except Exception as exc:
        session.say(f"Could not resume {arg}: {type(exc).__name__}: {exc}", "red")
        return
    session.show_recap()
    session.note_once(session.agent.resume_warning)


async def cmd_init(session: Session, arg: str) -> None:
    from kimicode.prompts import load_prompt

    try:
        prompt = load_prompt("init.md")
    except RuntimeError as exc:
        session.say(str(exc), "red")
        return
    if arg:
        prompt += f"\n\nAdditional instructions from the user: {arg}"
    # what the user asked comes first, so previews (session list, recap, /rewind) show it, not the prompt
    asked = f"/init {arg}".strip() + ": write AGENTS.md for this repository"
    message = f"{asked}\n\n<command-instructions>\n{prompt}\n</command-instructions>"
    await session.run_turn(message, echo="/init: asking the agent to write AGENTS.md")


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command("help", "show commands and keys", cmd_help),
        Command("clear", "start a new session (the conversation is forgotten)", cmd_clear),
        Command("compact", "summarise the conversation to free context", cmd_compact, "[instructions]"),
        Command("context", "what fills the context window", cmd_context),
        Command("cost", "tokens used and cost of this session", cmd_cost),
        Command("model", "show or switch the model", cmd_model, "[name] [--fresh] [--force]", model_choices),
        Command("prompt", "show the system prompt and tool definitions the model gets", cmd_prompt),
        Command("thinking", "reasoning effort", cmd_thinking, "low|high|max", lambda s: EFFORTS),
        Command(
            "permissions",
            "the permission mode and every rule with its file; set the mode",
            cmd_permissions,
            "[mode|clear]",
            lambda s: (*MODES, "clear"),
        ),
        Command(
            "reasoning", "show or hide the model's reasoning", cmd_reasoning, "show|hide", lambda s: ("show", "hide")
        ),
        Command("sessions", "list the saved sessions of this workspace", cmd_sessions),
        Command("resume", "switch to a saved session", cmd_resume, "[id]", session_choices),
        Command("init", "have the agent write AGENTS.md for this repository", cmd_init, "[notes]"),
        Command(
            "undo",
            "undo the last turn: its file changes and/or its messages",
            cmd_undo,
            "[files|conversation|both]",
            lambda s: ("files", "conversation", "both"),
        ),
        Command(
            "rewind",
            "pick an earlier turn and go back to before it (Esc Esc)",
            cmd_rewind,
            "[files|conversation|both]",
            lambda s: ("files", "conversation", "both"),
        ),
        Command("diff", "what this session (or turn N) changed in the files", cmd_diff, "[N]"),
        Command(
            "fork",
            "continue in a fork of this conversation with its own working tree",
            cmd_fork,
            "[worktree|copy|shared]",
            lambda s: ("worktree", "copy", "shared"),
        ),
        Command(
            "branches", "run the next prompt in N branches, verify each, pick one", cmd_branches, "[N [verify command]]"
        ),
        Command("login", "paste a new API key (checked, stored, used at once)", cmd_login),
        Command("trust", "whether this workspace's hooks, MCP servers, skills... are used", cmd_trust, "[on|off]"),
        Command("skills", "the skills the model may activate", cmd_skills),
        *(Command(name, summary, handler) for name, summary, handler in CLAUDE_COMMANDS),
        Command("exit", "leave kimicode", cmd_exit),
    )
}
ALIASES = {"quit": "exit", "q": "exit", "new": "clear", "plugins": "plugin"}
