"""The interactive session: read a message, run a turn on the agent, render it, repeat.

Input is a prompt_toolkit prompt (history, completion, a bottom toolbar); output is rich, written into
normal scrollback. While a turn runs no prompt is shown: a `KeyListener` catches Esc / Ctrl-C (interrupt)
and Shift-Tab (permission mode), and the `TurnView` keeps a status line at the bottom. Approval questions
pause both and ask with a small prompt_toolkit menu (one at a time, even when subagents ask together).

A session may open on a saved conversation (`-c`, `-r ID`, `--fork`): its last exchange is shown so the
user sees where they are. MCP servers start in the background as soon as the session opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rich.console import Console
from rich.text import Text

from kimicode._version import __version__
from kimicode.agent import options as agent_options
from kimicode.agent.core import Agent
from kimicode.agent.costs import session_cost
from kimicode.commands import CustomCommand
from kimicode.config.endpoint import kimicode_home
from kimicode.config.ui import UISettings
from kimicode.context.output import DEFAULT_CAP_CHARS
from kimicode.events import ContextUpdated, Event, Notice, ToolCallFinished, TurnFinished, UsageUpdated
from kimicode.extensions.slash import load_commands
from kimicode.permissions.engine import MODES
from kimicode.session.store import SessionError, latest_session
from kimicode.ui import commands
from kimicode.ui.approvals import Approver, SessionRules
from kimicode.ui.completion import FileIndex, expand_mentions
from kimicode.ui.console import endpoint_host, report_internal_error
from kimicode.ui.keys import KeyListener
from kimicode.ui.live import live_width
from kimicode.ui.notify import Notifier
from kimicode.ui.options import SessionOptions
from kimicode.ui.paste import Pastes, attach_image
from kimicode.ui.recap import opening_banner, resume_hint, show_recap
from kimicode.ui.render import transient_line
from kimicode.ui.shellmode import run_shell, with_shell_output
from kimicode.ui.statusline import refresh_for, status_line_for
from kimicode.ui.toolbar import GitBranch, McpStatus, Stats, mcp_counts, mcp_failure_line
from kimicode.ui.typeahead import input_footer, offer_plan, steer
from kimicode.ui.view import TurnView, expanded_result
from kimicode.ui.window import learn_window

__all__ = ["LATEST", "Session", "SessionOptions"]

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.formatted_text import StyleAndTextTuples

T = TypeVar("T")

TICK = 0.1
"""Seconds between redraws of the status line while a turn runs."""

LATEST = ""
"""`resume=LATEST`: continue the most recently used session of the workspace (`kimicode -c`)."""

CUSTOM_RELOAD = 2.0
"""Seconds a loaded list of custom commands is reused before the command directories are read again."""


class Session:
    """One interactive run: the agent (replaced by /clear), the prompt, and what the UI remembers."""

    def __init__(self, options: SessionOptions, console: Console, plain: bool) -> None:
        self.options = options
        self.console = console
        self.plain = plain
        self.home = kimicode_home()
        self.settings = UISettings.load(self.home)
        self.rules = SessionRules()
        self.stats = Stats()
        self.exit_requested = False
        self._view: TurnView | None = None
        self._listener: KeyListener | None = None
        self._interrupting = False
        self._typed_ahead = ""
        self.pastes = Pastes()
        """Long pastes, shown collapsed in the prompt and expanded when the message is sent."""
        self.shell_output: list[str] = []
        """`!command` runs not yet sent: they go to the model with the next message."""
        self.queued: list[str] = []
        """Messages typed and sent with Enter while a turn ran: sent in order when it ends."""
        self.last_result: tuple[str, str] | None = None
        """The last tool call's description and full result (Ctrl-O prints it)."""
        self._estimate = 0
        self._estimate_len = -1
        self._shown_notices: set[str] = set()
        """Warnings already printed (at startup, or the MCP status line): the agent's Notice repeating one
        at the start of the next turn is not shown again."""
        self._background: set[asyncio.Future[Any]] = set()
        self._custom: dict[str, CustomCommand] = {}
        self._custom_loaded = -CUSTOM_RELOAD
        self.approver = Approver(
            console,
            (options.workspace or Path(".")).expanduser().resolve(),
            self.rules,
            suspend=self._suspend_turn,
            resume=self._resume_turn,
            interrupt=self._interrupt,
            plain=plain,
        )
        self.opened = "new" if options.resume is None else ("forked" if options.fork else "resumed")
        """How the session opened: `new`, `resumed` or `forked` (from `options.resume`)."""
        self.forked_from: str | None = None
        self.agent = self._open_agent()
        self.notifier = Notifier.from_config(self.agent.settings.config.notify)
        """Turn ends and approval questions, told to a user looking elsewhere (ui/notify.py), as the
        configuration read once for the first agent says."""
        self._warm_checkpoints()
        self._open_workspace()
        self._prompt: PromptSession[str] | None = None

    # -- agent ------------------------------------------------------------------------------------

    def _open_workspace(self) -> None:
        """What the session keeps of the first agent's workspace: the approver's, the file index (@ completion),
        the git branch and the status line."""
        self.workspace = self.agent.workspace
        self.approver.workspace = self.workspace
        self.index = FileIndex(self.workspace)
        self.branch = GitBranch(self.workspace)
        self.status_line = status_line_for(self.workspace, trusted=self.agent.settings.trusted)
        """Claude Code's `statusLine` command (ui/statusline.py), run before each prompt; None without one."""

    def _options(self, workspace: Path, **changes: Any) -> agent_options.AgentOptions:
        """The settings of every Agent of the session (new, cleared or resumed): the command line's,
        over the workspace's configuration (kimicode/cli/options.py builds `self.options.settings`)."""
        settings = {**self.options.settings, "origin": "interactive", **changes}  # listings show these first
        return agent_options.AgentOptions.from_workspace(workspace, **settings)

    def _open_agent(self) -> Agent:
        """The first Agent: a new session, or `Agent.resume` of the one `options.resume` names."""
        o = self.options
        if o.resume is None:
            return Agent(self._options(o.workspace or Path(".")), approve=self.approver)
        target = o.resume
        if target == LATEST:
            where = (o.workspace or Path(".")).expanduser().resolve()
            info = latest_session(self.home, where)
            if info is None:
                raise SessionError(f"no session to continue in {where} (see `kimicode sessions list`)")
            target = info.id
        kwargs: dict[str, Any] = {"workspace": o.workspace} if o.workspace is not None else {}
        if o.fork and o.fork_workspace != "shared":
            kwargs["fork_workspace"] = o.fork_workspace
        agent = Agent.resume(target, fork=o.fork, options=self._options, approve=self.approver, **kwargs)
        if o.fork:
            self.forked_from = target
        return agent

    def _warm_checkpoints(self) -> None:
        """Store the workspace in the background while the user types, so the first turn that changes
        a file waits only for what changed since (`[checkpoints] warm_at_open = false` turns it off)."""
        cps = self.agent.checkpoints
        if cps is not None and self.agent.settings.config.checkpoints.warm_at_open:
            cps.warm()

    def _replaced(self) -> None:
        """Bookkeeping after `self.agent` was replaced by a new or resumed one."""
        self._warm_checkpoints()
        self.rules.clear()
        self.stats.reset()
        self._estimate_len = -1

    async def new_conversation(self) -> None:
        """/clear: a new Agent and session log, keeping the model, effort and permission mode."""
        old = self.agent
        self.agent = Agent(
            self._options(
                self.workspace, permission_mode=old.permission_mode, model=old.model_config.name, thinking=old.thinking
            ),
            approve=self.approver,
        )
        self._replaced()
        with contextlib.suppress(Exception):
            await old.aclose()
        self.start_mcp()

    async def resume_session(self, session_id: str) -> None:
        """/resume: switch to a saved session in place (in this workspace, keeping the permission mode).

        The model and effort are the session's recorded ones unless given on the command line. Raises
        SessionError (a ValueError) for an unknown or ambiguous id; the current session then goes on.
        """
        old = self.agent
        agent = Agent.resume(
            session_id,
            workspace=self.workspace,
            approve=self.approver,
            options=lambda where: self._options(where, permission_mode=old.permission_mode),
        )
        self.agent = agent
        self.forked_from = None
        self._replaced()
        with contextlib.suppress(Exception):
            await old.aclose()
        self.start_mcp()

    async def continue_in(self, child: Agent) -> None:
        """Make `child` (a fork of the session's agent, maybe in its own working tree) the session's agent,
        and close the old one (/fork, a /model switch that forks)."""
        old = self.agent
        self.agent, self.forked_from = child, old.session_id
        self.workspace = self.approver.workspace = child.workspace
        self.index, self.branch = FileIndex(child.workspace), GitBranch(child.workspace)
        self._replaced()
        with contextlib.suppress(Exception):
            await old.aclose()

    def custom_commands(self) -> dict[str, CustomCommand]:
        """The custom slash commands (kimicode's and Claude Code's folders, plugins', skills), re-read every
        few seconds so a file added during the session shows up."""
        now = time.monotonic()
        if now - self._custom_loaded >= CUSTOM_RELOAD:
            self._custom_loaded = now
            try:
                trusted = bool(self.agent.options.config and self.agent.options.config.trusted)
                self._custom = load_commands(self.workspace, self.home, trusted=trusted)  # + Claude's, plugins', skills
            except Exception:  # an unreadable directory: keep what was loaded before
                pass
        return self._custom

    def cost(self) -> float | None:
        """Dollars spent in this session at the model's prices (configured, else Moonshot's list prices on
        Moonshot's endpoint), or None when no price is known."""
        try:
            return session_cost(self.agent)
        except Exception:
            return None

    # -- MCP --------------------------------------------------------------------------------------

    def start_mcp(self) -> None:
        """Start the agent's MCP servers in the background (they start while the user types); when they
        are up, report the ones that failed in one status line."""
        manager = self.agent.extras.mcp
        if manager is None:
            return
        agent = self.agent
        try:
            task = manager.begin()
        except Exception as exc:
            self.say(f"! MCP servers could not be started: {exc}", "yellow")
            return
        task.add_done_callback(lambda done: self._mcp_started(agent, done))

    def _mcp_started(self, agent: Agent, task: asyncio.Future[Any]) -> None:
        manager = agent.extras.mcp
        if agent is not self.agent or manager is None or task.cancelled():
            return
        failed = [s for s in manager.servers if s.status in ("failed", "timeout")]
        if task.exception() is not None and not failed:
            self.announce(f"! MCP: the servers could not be started ({task.exception()})", "yellow")
            return
        if not failed:
            self._redraw_prompt()  # the toolbar's MCP count changed
            return
        self._shown_notices.update(manager.problems())
        self.announce(mcp_failure_line(failed, agent.home), "yellow")

    def mcp_status(self) -> McpStatus | None:
        """Counts for the toolbar, or None when no server is configured."""
        return mcp_counts(self.agent.extras.mcp)

    def cycle_mode(self) -> str:
        """Shift-Tab: default → accept-edits → plan → yolo → default."""
        current = self.agent.permission_mode
        mode = MODES[(MODES.index(current) + 1) % len(MODES)] if current in MODES else MODES[0]
        self.agent.set_permission_mode(mode)
        return mode

    # -- output -----------------------------------------------------------------------------------

    def say(self, text: str, style: str = "") -> None:
        """One line of UI output (above the live lines when a turn is running)."""
        line = Text(text, style=style)
        if self._view is not None and self._view.live is not None and not self._view.live.paused:
            self._view.print(line)
        else:
            self.console.print(line, highlight=False)

    def announce(self, text: str, style: str = "") -> None:
        """A line printed whenever something happens in the background: above the prompt (which is
        redrawn under it) when one is on screen, else like `say`."""
        from prompt_toolkit.application import get_app_or_none, run_in_terminal

        app = get_app_or_none()
        if app is None or not app.is_running:
            self.say(text, style)
            return
        future = asyncio.ensure_future(run_in_terminal(lambda: self.say(text, style)))
        self._background.add(future)
        future.add_done_callback(self._background.discard)

    def transient(self, text: str) -> contextlib.AbstractContextManager[None]:
        """Show `text` on the current line while a block runs, then erase it (render.transient_line)."""
        return transient_line(self.console, self.plain, text)

    @staticmethod
    def _redraw_prompt() -> None:
        """Redraw the prompt (and its toolbar) if one is on screen."""
        from prompt_toolkit.application import get_app_or_none

        app = get_app_or_none()
        if app is not None and app.is_running:
            app.invalidate()

    def note_once(self, text: str | None, style: str = "yellow") -> None:
        """Print a warning now and keep the agent's Notice of the same text from repeating it."""
        if text and text not in self._shown_notices:
            self._shown_notices.add(text)
            self.say(f"! {text}", style)

    def context_estimate(self) -> int:
        """Tokens the conversation holds now (the toolbar's figure), counted again only when it changed."""
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
        from kimicode.ui.prompt import toolbar

        return toolbar(self)

    # -- input ------------------------------------------------------------------------------------

    def _build_prompt(self) -> PromptSession[str]:
        from kimicode.ui.prompt import build_prompt

        return build_prompt(self)

    async def read_input(self) -> str:
        """The next message (raises KeyboardInterrupt / EOFError as prompt_toolkit does)."""
        if self._prompt is None:
            self._prompt = self._build_prompt()
        default, self._typed_ahead = self._typed_ahead, ""
        await refresh_for(self)
        message: StyleAndTextTuples = [("class:prompt", "> " if self.plain else "› ")]
        return await self._prompt.prompt_async(message, default=default)

    # -- a turn -----------------------------------------------------------------------------------

    def notify(self, kind: str, message: str) -> None:
        """A notification (bell or OSC 9, and `[notify] command`): see ui/notify.py."""
        self.notifier.notify(
            kind,
            message,
            None if self.plain else self.console.file,
            session_id=self.agent.session_id,
            cwd=str(self.workspace),
        )

    def _suspend_turn(self) -> None:
        self.notify("approval-requested", "kimicode is waiting for your approval")
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
        elif isinstance(ev, Notice) and ev.text not in self._shown_notices:
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

    def expand_last(self) -> None:
        """Ctrl-O: print the last tool result in full."""
        if self._view is not None and self._view.expand_last():
            return
        if self.last_result is None:
            self.say("no tool result to expand yet", "dim")
        else:
            self.console.print(expanded_result(*self.last_result), highlight=False)

    def _on_key(self, key: str) -> None:
        if key == "enter":
            listener = self._listener
            if listener is not None and listener.typed.strip():
                self.queued.append(listener.typed)
                listener.typed = ""
            key = "typed"
        if key == "typed":
            if self._view is not None and self._view.live is not None and not self._view.live.paused:
                self._view.live.redraw()
        elif key in ("escape", "c-c"):
            self._interrupt()
        elif key == "c-o":
            self.expand_last()
        elif key == "c-s" and self._listener is not None:
            steer(self, self._listener)
        elif key == "s-tab":
            mode = self.cycle_mode()
            note = " (nothing is changed: the agent investigates and proposes a plan)" if mode == "plan" else ""
            self.say(f"permission mode: {mode}{note}", "cyan")

    def _on_stats(self, ev: Event) -> None:
        if isinstance(ev, UsageUpdated | ContextUpdated):
            self.stats.update(ev)

    async def run_turn(self, text: str, echo: str | None = None) -> TurnFinished | None:
        """Send `text` (with `@file` attachments) and render the turn until it ends."""
        if echo:
            self.say(echo, "dim")
        message, attachments = expand_mentions(self.pastes.expand(text), self.workspace, DEFAULT_CAP_CHARS, self.index)
        message = with_shell_output(self, message)
        agent = self.agent
        for att in attachments:
            if att.kind == "image":
                attach_image(self, att.path, att.resolved)
                continue
            note = f", {att.note}" if att.note else ""
            self.say(f"+ attached {att.path} ({att.lines} lines{note})", "dim")
        view = TurnView(
            self.console,
            plain=self.plain,
            show_reasoning=self.settings.show_reasoning,
            tool_kind=lambda name: t.kind if (t := agent.tools.get(name)) is not None else None,
            on_stats=self._on_stats,
            previewed=self.approver.shown,
            footer=lambda: input_footer(self.queued, listener.typed, live_width(self.console.size.width)),
        )
        listener = KeyListener(self._on_key)
        self._view, self._listener, self._interrupting = view, listener, False
        self._catch_sigint(self._interrupt)

        async def ticker() -> None:
            while True:
                await asyncio.sleep(TICK)
                view.tick()

        tick_task = asyncio.create_task(ticker()) if not self.plain else None
        started = time.monotonic()
        finished: TurnFinished | None = None
        changed_files = False
        listener.start()
        view.start()
        try:
            async for ev in agent.stream(message):
                if isinstance(ev, Notice) and ev.text in self._shown_notices:
                    continue  # printed already (at startup, or the MCP status line)
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
        self.queued[:0], agent.extras.steering[:] = agent.extras.steering, []  # steered too late: sent next
        if finished is None or finished.status in ("interrupted", "error"):
            # interrupted or failed: what was queued goes back into the prompt, to be edited or sent (Enter)
            failed = [text] if finished is not None and finished.error_kind in ("transient", "auth") else []
            typed = [self._typed_ahead] if self._typed_ahead else []
            self._typed_ahead = "\n\n".join([*failed, *self.queued, *typed])  # a refused message is not lost
            self.queued.clear()
        self.last_result = view.last_result or self.last_result
        if finished is not None and time.monotonic() - started >= self.notifier.after_seconds:
            self.notify("turn-finished", f"kimicode: {finished.status}: {finished.result or finished.error or ''}")
        if changed_files:
            self.index.refresh()
        return finished

    def _report_internal_error(self, exc: BaseException) -> None:
        report_internal_error(self.console, self.home, exc)

    # -- the loop ---------------------------------------------------------------------------------

    def banner(self) -> None:
        """The first lines: version, model, endpoint and workspace; where a resumed session stands."""
        opening_banner(self, __version__, endpoint_host(self.agent.endpoint.base_url))

    def show_recap(self) -> None:
        """Where a resumed session stands: its id, and the last prompt and answer, briefly."""
        show_recap(self)

    async def run(self) -> int:
        """The read-eval-print loop; returns the exit code."""
        self.index.refresh()
        self.banner()
        self.start_mcp()
        learn_window(self)
        if self.options.first_prompt:  # `kimicode "PROMPT"`: sent as if typed
            self.queued.append(self.options.first_prompt)
        armed = False
        try:
            while not self.exit_requested:
                try:
                    if self.queued:  # typed while the last turn ran: sent now, in order
                        text = self.queued.pop(0)
                        self.console.print(Text("> " if self.plain else "› ", style="bold cyan") + Text(text))
                    else:
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
                if text.startswith("!") and text[1:].strip():  # `!cmd`: the user's own shell command
                    await run_shell(self, text[1:].strip())
                    continue
                if commands.looks_like_command(text, self.custom_commands()):
                    try:
                        await commands.dispatch(self, text)
                    except Exception as exc:
                        self._report_internal_error(exc)
                    continue
                finished = await self.run_turn(text)
                await offer_plan(self, finished)
        finally:
            self.resume_hint()
            with contextlib.suppress(Exception):
                await self.agent.aclose()
        return 0

    def resume_hint(self) -> None:
        """On exit: how to come back to this conversation (only when it was saved: it has a prompt)."""
        resume_hint(self)
