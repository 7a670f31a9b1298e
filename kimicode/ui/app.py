"""The interactive session: read a message, run a turn on the agent, render it, repeat.

Input is a prompt_toolkit prompt (history, completion, a bottom toolbar); output is rich, written into
normal scrollback. While a turn runs no prompt is shown: a `KeyListener` catches Esc / Ctrl-C (interrupt)
and Shift-Tab (permission mode), and the `TurnView` keeps a status line at the bottom. Approval questions
pause both and ask with a small prompt_toolkit menu.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from rich.console import Console
from rich.text import Text

from kimicode._version import __version__
from kimicode.agent.core import Agent
from kimicode.agent.events import ContextUpdated, Event, Notice, ToolCallFinished, TurnFinished, UsageUpdated
from kimicode.agent.permissions import MODES
from kimicode.config import ConfigError, kimicode_home
from kimicode.context.output import DEFAULT_CAP_CHARS
from kimicode.ui import commands
from kimicode.ui.approvals import Approver, SessionRules
from kimicode.ui.completion import FileIndex, PromptCompleter, expand_mentions
from kimicode.ui.keys import KeyListener
from kimicode.ui.settings import UISettings
from kimicode.ui.toolbar import GitBranch, Stats, short_path, toolbar_fragments
from kimicode.ui.view import TurnView

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.formatted_text import StyleAndTextTuples

T = TypeVar("T")

TICK = 0.1
"""Seconds between redraws of the status line while a turn runs."""


@dataclass(frozen=True)
class AgentOptions:
    """The settings every Agent of the session is built with (the command line's flags)."""

    model: str | None = None
    base_url: str | None = None
    workspace: Path = Path(".")
    permission_mode: str = "default"
    thinking: str | None = None
    max_turns: int = 200
    max_retries: int = 5
    retry_base_delay: float = 1.0
    request_timeout: float = 300.0


def plain_output() -> bool:
    """True when output must be plain text: stdout is not a terminal, `TERM=dumb`, or `NO_COLOR` is set."""
    return not sys.stdout.isatty() or os.environ.get("TERM", "") == "dumb" or bool(os.environ.get("NO_COLOR"))


def make_console(plain: bool) -> Console:
    if plain:
        return Console(color_system=None, highlight=False, emoji=False, markup=False, force_terminal=False)
    return Console(highlight=False, emoji=False, markup=False)


class Session:
    """One interactive run: the agent (replaced by /clear), the prompt, and what the UI remembers."""

    def __init__(self, options: AgentOptions, console: Console, plain: bool) -> None:
        self.options = options
        self.console = console
        self.plain = plain
        self.home = kimicode_home()
        self.settings = UISettings.load(self.home)
        self.rules = SessionRules()
        self.stats = Stats()
        self.workspace = options.workspace.expanduser().resolve()
        self.index = FileIndex(self.workspace)
        self.branch = GitBranch(self.workspace)
        self.exit_requested = False
        self._view: TurnView | None = None
        self._listener: KeyListener | None = None
        self._interrupting = False
        self._typed_ahead = ""
        self._estimate = 0
        self._estimate_len = -1
        self.approver = Approver(
            console,
            self.workspace,
            self.rules,
            suspend=self._suspend_turn,
            resume=self._resume_turn,
            interrupt=self._interrupt,
        )
        self.agent = self._make_agent(options.permission_mode, options.model, options.thinking)
        self._prompt: PromptSession[str] | None = None

    # -- agent ------------------------------------------------------------------------------------

    def _make_agent(self, mode: str, model: str | None, thinking: str | None) -> Agent:
        o = self.options
        return Agent(
            model=model,
            base_url=o.base_url,
            workspace=self.workspace,
            permission_mode=mode,
            approve=self.approver,
            thinking=thinking,
            max_turns=o.max_turns,
            max_retries=o.max_retries,
            retry_base_delay=o.retry_base_delay,
            request_timeout=o.request_timeout,
        )

    async def new_conversation(self) -> None:
        """/clear: a new Agent and session log, keeping the model, effort and permission mode."""
        old = self.agent
        self.agent = self._make_agent(old.permission_mode, old.endpoint.model, old.thinking)
        self.rules.clear()
        self.stats.reset()
        self._estimate_len = -1
        with contextlib.suppress(Exception):
            await old.aclose()

    async def resume_session(self, session_id: str) -> None:
        """/resume: an Agent continuing a saved session (needs `Agent.resume(session_id, **settings)`)."""
        old = self.agent
        o = self.options
        resume = getattr(Agent, "resume")  # noqa: B009 - present only in builds with resumable sessions
        agent = resume(
            session_id,
            model=old.endpoint.model,
            base_url=o.base_url,
            workspace=self.workspace,
            permission_mode=old.permission_mode,
            approve=self.approver,
            thinking=old.thinking,
            max_turns=o.max_turns,
            max_retries=o.max_retries,
            retry_base_delay=o.retry_base_delay,
            request_timeout=o.request_timeout,
        )
        if inspect.isawaitable(agent):
            agent = await agent
        self.agent = agent
        self.rules.clear()
        self.stats.reset()
        self._estimate_len = -1
        with contextlib.suppress(Exception):
            await old.aclose()

    def cycle_mode(self) -> str:
        """Shift-Tab: default → accept-edits → yolo → default."""
        current = self.agent.permission_mode
        mode = MODES[(MODES.index(current) + 1) % len(MODES)] if current in MODES else MODES[0]
        self.agent.permission_mode = mode
        return mode

    # -- output -----------------------------------------------------------------------------------

    def say(self, text: str, style: str = "") -> None:
        """One line of UI output (above the live lines when a turn is running)."""
        line = Text(text, style=style)
        if self._view is not None and self._view.live is not None and not self._view.live.paused:
            self._view.print(line)
        else:
            self.console.print(line, highlight=False)

    def _context_estimate(self) -> int:
        messages = self.agent.messages
        if len(messages) != self._estimate_len:
            self._estimate_len = len(messages)
            rows, _how = commands.breakdown_rows(self)
            self._estimate = sum(n for _, n in rows)
        return self._estimate

    def effort(self) -> str | None:
        """The reasoning effort in use: the chosen one, else what the model's profile sends by default."""
        agent = self.agent
        if agent.thinking:
            return agent.thinking
        try:
            value = agent.profile.request_params(None).get("reasoning_effort")
        except Exception:
            return None
        return value if isinstance(value, str) else None

    def toolbar(self) -> StyleAndTextTuples:
        """The bottom toolbar's content (never raises: a failing toolbar would take the prompt down)."""
        agent = self.agent
        fragments: StyleAndTextTuples = []
        try:
            fragments.extend(
                toolbar_fragments(
                    model=agent.endpoint.model,
                    effort=self.effort(),
                    stats=self.stats,
                    window=agent.context_window,
                    estimate=self._context_estimate(),
                    mode=agent.permission_mode,
                    workspace=self.workspace,
                    branch=self.branch.get(),
                )
            )
        except Exception:
            fragments.append(("", f" {agent.endpoint.model} │ ⏵ {agent.permission_mode} "))
        return fragments

    # -- input ------------------------------------------------------------------------------------

    def _build_prompt(self) -> PromptSession[str]:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.completion import ThreadedCompleter
        from prompt_toolkit.history import FileHistory, History, InMemoryHistory
        from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
        from prompt_toolkit.styles import Style

        kb = KeyBindings()

        @kb.add("enter")
        def _send(event: KeyPressEvent) -> None:
            buf = event.current_buffer
            state = buf.complete_state
            if state is not None and state.current_completion is not None:
                buf.apply_completion(state.current_completion)
                return
            buf.validate_and_handle()

        @kb.add("c-j")
        @kb.add("escape", "enter")
        def _newline(event: KeyPressEvent) -> None:
            event.current_buffer.insert_text("\n")

        @kb.add("s-tab")
        def _mode(event: KeyPressEvent) -> None:
            self.cycle_mode()
            event.app.invalidate()

        @kb.add("c-c")
        def _ctrl_c(event: KeyPressEvent) -> None:
            buf = event.current_buffer
            if buf.text:
                buf.reset()
            else:
                event.app.exit(exception=KeyboardInterrupt)

        history: History
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            path = self.home / "history"
            path.touch(exist_ok=True)
            history = FileHistory(str(path))
        except OSError:
            history = InMemoryHistory()
        style = Style.from_dict(
            {
                "bottom-toolbar": "noreverse bg:#262626 fg:#bcbcbc",
                "toolbar.model": "bold fg:#5fafff",
                "toolbar.sep": "fg:#585858",
                "toolbar.dim": "fg:#808080",
                "toolbar.warn": "fg:#ffaf00 bold",
                "toolbar.yolo": "fg:#ff5f5f bold",
                "toolbar.edits": "fg:#ffaf00",
                "prompt": "bold fg:#5fafff",
            }
        )
        completer = PromptCompleter(lambda: commands.command_infos(self), self.index)
        return PromptSession(
            multiline=True,
            key_bindings=kb,
            history=history,
            completer=ThreadedCompleter(completer),
            complete_while_typing=True,
            bottom_toolbar=None if os.environ.get("TERM", "") == "dumb" else self.toolbar,
            style=style,
            prompt_continuation=lambda width, line, wrap: " " * width,
            enable_history_search=False,
            reserve_space_for_menu=6,
            include_default_pygments_style=False,
        )

    async def read_input(self) -> str:
        """The next message (raises KeyboardInterrupt / EOFError as prompt_toolkit does)."""
        if self._prompt is None:
            self._prompt = self._build_prompt()
        default, self._typed_ahead = self._typed_ahead, ""
        message: StyleAndTextTuples = [("class:prompt", "> " if self.plain else "› ")]
        return await self._prompt.prompt_async(message, default=default)

    # -- a turn -----------------------------------------------------------------------------------

    def _suspend_turn(self) -> None:
        if self._listener is not None:
            self._listener.stop()
        if self._view is not None:
            self._view.suspend()

    def _resume_turn(self) -> None:
        if self._view is not None:
            self._view.resume()
        if self._listener is not None:
            self._listener.start()
        self._catch_sigint(self._interrupt)  # the approval prompt removed our handler when it closed

    @staticmethod
    def _catch_sigint(callback: Callable[[], None] | None) -> None:
        """Route SIGINT to `callback` (None: back to Python's default, KeyboardInterrupt)."""
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop = asyncio.get_running_loop()
            if callback is None:
                loop.remove_signal_handler(signal.SIGINT)
            else:
                loop.add_signal_handler(signal.SIGINT, callback)

    def on_side_event(self, ev: Event) -> None:
        """Events emitted outside a turn (by /compact): statistics and one-line notices."""
        if isinstance(ev, UsageUpdated | ContextUpdated):
            self.stats.update(ev)
        elif isinstance(ev, Notice):
            style = {"warning": "yellow", "error": "red"}.get(ev.level, "dim")
            self.say(ev.text, style)

    async def run_cancellable(self, work: Awaitable[T]) -> T:
        """Await `work` while Esc / Ctrl-C cancel it (raising CancelledError here)."""
        task = asyncio.ensure_future(work)

        def cancel(key: str = "c-c") -> None:
            if key in ("escape", "c-c"):
                task.cancel()

        listener = KeyListener(cancel)
        listener.start()
        self._catch_sigint(cancel)
        try:
            return await task
        finally:
            listener.stop()
            self._catch_sigint(None)

    def _interrupt(self) -> None:
        if self._interrupting:
            return
        self._interrupting = True
        if self._view is not None:
            self._view.hint = "interrupting…"
        self.agent.interrupt()

    def _on_key(self, key: str) -> None:
        if key in ("escape", "c-c"):
            self._interrupt()
        elif key == "s-tab":
            mode = self.cycle_mode()
            self.say(f"permission mode: {mode}", "cyan")

    def _on_stats(self, ev: Event) -> None:
        if isinstance(ev, UsageUpdated | ContextUpdated):
            self.stats.update(ev)

    async def run_turn(self, text: str, echo: str | None = None) -> TurnFinished | None:
        """Send `text` (with `@file` attachments) and render the turn until it ends."""
        if echo:
            self.say(echo, "dim")
        message, attachments = expand_mentions(text, self.workspace, DEFAULT_CAP_CHARS, self.index)
        for att in attachments:
            note = f", {att.note}" if att.note else ""
            self.say(f"+ attached {att.path} ({att.lines} lines{note})", "dim")
        agent = self.agent
        view = TurnView(
            self.console,
            plain=self.plain,
            show_reasoning=self.settings.show_reasoning,
            tool_kind=lambda name: t.kind if (t := agent.tools.get(name)) is not None else None,
            on_stats=self._on_stats,
        )
        listener = KeyListener(self._on_key)
        self._view, self._listener, self._interrupting = view, listener, False
        self._catch_sigint(self._interrupt)

        async def ticker() -> None:
            while True:
                await asyncio.sleep(TICK)
                view.tick()

        tick_task = asyncio.create_task(ticker()) if not self.plain else None
        finished: TurnFinished | None = None
        changed_files = False
        listener.start()
        view.start()
        try:
            async for ev in agent.stream(message):
                view.handle(ev)
                if isinstance(ev, TurnFinished):
                    finished = ev
                elif isinstance(ev, ToolCallFinished) and not ev.is_error:
                    changed_files = changed_files or ev.name not in ("read_file", "glob", "grep")
        except Exception as exc:  # a bug must not end the session or print a traceback
            view.close()
            self._report_internal_error(exc)
        finally:
            if tick_task is not None:
                tick_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await tick_task
            listener.stop()
            self._catch_sigint(None)
            view.close()
            self._view = self._listener = None
            self.console.print()
        self._typed_ahead = listener.typed
        if changed_files:
            self.index.refresh()
        return finished

    def _report_internal_error(self, exc: BaseException) -> None:
        log = self.home / "ui-errors.log"
        where = ""
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} kimicode {__version__}\n")
                fh.write("".join(traceback.format_exception(exc)))
            where = f" (details in {log})"
        except OSError:
            pass
        self.console.print(
            Text(f"✗ internal error: {type(exc).__name__}: {exc}{where}. The session continues.", style="red")
        )

    # -- the loop ---------------------------------------------------------------------------------

    def banner(self) -> None:
        agent = self.agent
        line = Text()
        line.append("kimicode", style="bold")
        line.append(f" {__version__} · {agent.endpoint.model} · {short_path(self.workspace, 60)}", style="dim")
        self.console.print(line)
        self.console.print(
            Text("/help for commands · @path attaches a file · Esc interrupts · Ctrl-D exits", style="dim")
        )

    async def run(self) -> int:
        """The read-eval-print loop; returns the exit code."""
        self.index.refresh()
        self.banner()
        armed = False
        try:
            while not self.exit_requested:
                try:
                    text = await self.read_input()
                except KeyboardInterrupt:
                    if armed:
                        break
                    armed = True
                    self.say("Press Ctrl-C again or Ctrl-D to exit.", "dim")
                    continue
                except EOFError:
                    break
                armed = False
                if not text.strip():
                    continue
                if commands.looks_like_command(text):
                    try:
                        await commands.dispatch(self, text)
                    except Exception as exc:
                        self._report_internal_error(exc)
                    continue
                await self.run_turn(text)
        finally:
            with contextlib.suppress(Exception):
                await self.agent.aclose()
        return 0


def run_interactive(
    *,
    model: str | None = None,
    base_url: str | None = None,
    workspace: str | Path = ".",
    permission_mode: str = "default",
    thinking: str | None = None,
    max_turns: int = 200,
    max_retries: int = 5,
    retry_base_delay: float = 1.0,
    request_timeout: float = 300.0,
) -> int:
    """Run the interactive terminal session; return the process exit code.

    Configuration problems (no API key, a bad base URL) are reported in one line on stderr (exit 2).
    """
    options = AgentOptions(
        model=model,
        base_url=base_url,
        workspace=Path(workspace),
        permission_mode=permission_mode,
        thinking=thinking,
        max_turns=max_turns,
        max_retries=max_retries,
        retry_base_delay=retry_base_delay,
        request_timeout=request_timeout,
    )
    plain = plain_output()
    console = make_console(plain)
    try:
        session = Session(options, console, plain)
    except (ConfigError, ValueError) as exc:
        sys.stderr.write(f"kimicode: {exc}\n")
        return 2
    try:
        return asyncio.run(session.run())
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        sys.stderr.write(f"kimicode: unexpected error: {type(exc).__name__}: {exc}\n")
        return 1
