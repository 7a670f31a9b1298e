"""What a turn looks like in the terminal: the agent's events turned into scrollback and a live status line.

One `TurnView` per turn. Answers stream as Markdown (`MarkdownStream`), reasoning streams dimmed under a
header or is summarised by a `thinking… 12s` status, each tool call is one line plus a short result, and
retries, notices and errors are one line each; a todo_write result is a checklist and a subagent's result
one line. In plain mode (no terminal, `TERM=dumb`, `NO_COLOR`)
nothing is redrawn: text is written through without escape codes.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, RenderableType
from rich.text import Text

from kimicode.events import (
    ContentDelta,
    ContextUpdated,
    Event,
    MessageCommitted,
    Notice,
    PermissionDenied,
    ReasoningDelta,
    Retrying,
    StepStarted,
    SubagentEvent,
    ToolArgumentsDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolOutputDelta,
    TurnFinished,
    UsageUpdated,
)
from kimicode.termsafe import sanitize
from kimicode.tools.registry import parse_arguments
from kimicode.ui.format import (
    describe_call,
    diff_text,
    elapsed,
    more_lines,
    one_line,
    printable,
    tail_with_hidden,
    tokens,
)
from kimicode.ui.live import live_width
from kimicode.ui.render import LiveRegion, MarkdownStream, TextStream, render_ansi

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

TODO_MARKS = {"pending": ("☐", ""), "in_progress": ("◐", "bold"), "done": ("☑", "dim")}
"""The mark and style of a task per status."""
TODO_SHOWN = 20
"""Tasks listed at most; the rest are counted."""

ERROR_HINTS = {
    "auth": "Run /login to paste a new key (checked at once), then Enter sends your message again.",
    "quota": "Then send your message again, or switch model with /model.",
    "context_length": "The conversation no longer fits the model's context: run /compact or /clear, then retry.",
    "transient": "The service kept failing after retries: your message is back in the prompt (Enter sends it "
    "again); `kimicode doctor` checks the endpoint.",
    "bad_request": "The endpoint rejected the request; try /clear if it keeps happening, or check /model.",
    "protocol": "The endpoint sent something unexpected; send the message again or check --base-url.",
}


LIVE_LINES = 4
"""Lines of a running command's output shown live under it."""
RUNNING_KEEP = 1 << 20
"""Characters of a running command's output kept for Ctrl-O (the tool's own result is capped as well)."""
LIVE_KEEP = 8192
"""Characters of a running command's output kept for the live tail."""
RESULT_LINES = 5
"""Lines of a finished command's output shown (the rest is counted; Ctrl-O shows all of it)."""
EXPAND_KEY = "ctrl+o"

_STATUS_LINE = re.compile(r"\n?\[(?:exit code|killed by|timed out)[^\n]*\]$")
"""The status line a command tool appends to its output (the summary says the same)."""


def _short_summary(summary: str, header: str) -> str:
    """`bash: make (exit 0, 3 lines)` under the line `bash: make` becomes `exit 0, 3 lines`."""
    if summary.startswith(header):
        rest = summary[len(header) :].strip()
        if rest.startswith("(") and rest.endswith(")"):
            return rest[1:-1]
        return rest or summary
    return summary


@dataclass
class _Call:
    name: str
    args: Mapping[str, Any]
    started: float


class TurnView:
    """Render the events of one turn.

    `tool_kind(name)` says whether a tool is `read`, `edit`, `execute` or `other` (it decides how results
    are summarised); `on_stats` receives usage and context events for the toolbar.
    """

    def __init__(
        self,
        console: Console,
        *,
        plain: bool,
        show_reasoning: bool,
        tool_kind: Callable[[str], str | None] = lambda _name: None,
        on_stats: Callable[[Event], None] | None = None,
        previewed: Callable[[str], bool] = lambda _call_id: False,
        footer: Callable[[], RenderableType | None] = lambda: None,
        hint: str = "esc to interrupt",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console
        self.plain = plain
        self.show_reasoning = show_reasoning
        self.tool_kind = tool_kind
        self.on_stats = on_stats
        self.previewed = previewed
        self.footer = footer
        """What goes under the status line (the input typed while the turn runs, the queued messages)."""
        """True for a call whose diff the approval question showed already."""
        self.hint = hint
        self.clock = clock
        self.live: LiveRegion | None = (
            None if plain else LiveRegion(console.file, lambda: console.size.height, self._live_parts, console=console)
        )
        self.answer = MarkdownStream(console, self.live, clock=clock)
        self.reasoning = TextStream(console, self.live)
        self._phase = "waiting for the model"
        self._phase_since = clock()
        self._turn_start = clock()
        self._reasoning_start: float | None = None
        self._reasoning_open = False
        self._args_chars = 0
        self._retry_at = 0.0
        self._calls: dict[str, _Call] = {}
        self._output: dict[str, str] = {}
        """The latest output of each running command (its tail is shown live)."""
        self._so_far: dict[str, list[str]] = {}
        """Each running command's output so far (about RUNNING_KEEP characters at most), for Ctrl-O."""
        self.last_result: tuple[str, str] | None = None
        """The last finished tool call (its one-line description, its full result) for Ctrl-O."""
        self._denied: set[str] = set()
        self._last_header: str | None = None
        self._section = ""
        self._frame = 0
        self._last_tick = 0.0
        self._closed = False
        self.finished: TurnFinished | None = None

    # -- output helpers ---------------------------------------------------------------------------

    def print(self, renderable: RenderableType) -> None:
        """Print into scrollback above the live lines."""
        if self.live is None:
            self.console.print(renderable, highlight=False)
            return
        self.live.print_above(render_ansi(self.console, renderable))

    def _section_break(self, kind: str) -> None:
        """A blank line before the turn's output and between kinds of output (reasoning, answer, tools)."""
        if self._section != kind:
            self.print(Text(""))
        self._section = kind

    def _status_text(self) -> str:
        if self.live is None or self._closed:
            return ""
        now = self.clock()
        spin = SPINNER[self._frame % len(SPINNER)]
        phase = self._phase
        if phase == "thinking":
            phase = f"thinking… {elapsed(now - self._phase_since)}"
        elif phase == "retrying":  # counts down to the retry, then up while the retried request waits
            left = self._retry_at - now
            phase = f"retrying in {left:.0f}s…" if left > 0 else f"retried, waiting for the model… {elapsed(-left)}"
        elif phase.startswith("preparing"):
            phase = f"{phase} ({self._args_chars / 1024:.1f} KB)"
        else:
            phase = f"{phase}… {elapsed(now - self._phase_since)}"
        line = Text()
        line.append(f"{spin} ", style="cyan")
        line.append(phase, style="bold" if self._phase == "thinking" else "")
        total = now - self._turn_start
        # while a tool runs, the time shown is the tool's own (the turn's total would read as the command's)
        running = self._phase.startswith("running ")
        overall = f"{elapsed(total)} · " if not running and total - (now - self._phase_since) >= 1 else ""
        room = live_width(self.console.size.width)  # a live row: short, so a resize cannot garble it
        for tail in (f"  ({overall}{self.hint})", f"  ({self.hint})", f"\n  ({overall}{self.hint})"):
            if line.cell_len + len(tail) <= room or tail.startswith("\n"):  # else on a row of its own
                line.append(tail, style="dim")
                break
        rows = line.split("\n")
        for row in rows:
            row.truncate(room, overflow="ellipsis")
        return render_ansi(self.console, Text("\n").join(rows))

    def _live_parts(self) -> list[str]:
        parts = [self.reasoning.live_text()] if self._reasoning_open and self.show_reasoning else []
        parts.append(self.answer.live_text())
        parts.append(self._live_tail())
        status = self._status_text()
        if status and any(parts):
            status = "\n" + status if not parts[-1].endswith("\n\n") else status
        parts.append(status)
        footer = self.footer() if status else None
        if footer is not None:
            parts.append(render_ansi(self.console, footer))
        return parts

    def _live_tail(self) -> str:
        """The last lines of the most recent running command that printed something."""
        if self.live is None or self._closed:
            return ""
        out = next((self._output[c] for c in reversed(self._calls) if self._output.get(c)), "")
        lines, _hidden = tail_with_hidden(out, LIVE_LINES, live_width(self.console.size.width) - 4)
        if not lines:
            return ""
        return render_ansi(self.console, Text("\n".join(f"    {line}" for line in lines), style="dim"))

    def expand_last(self) -> bool:
        """Ctrl-O: print the output so far of the command running now (the one that printed last), else
        the last tool result in full (False when there is neither)."""
        running = next((c for c in reversed(self._calls) if self._so_far.get(c)), None)
        if running is not None:
            call = self._calls[running]
            head = f"output so far (still running) of {describe_call(call.name, call.args)}"
            self.print(expanded_result(head, "".join(self._so_far[running]), full=False))
            return True
        if self.last_result is None:
            return False
        self.print(expanded_result(*self.last_result))
        return True

    def _running(self, call: _Call) -> None:
        """The status shows this running call, timed from its own start."""
        self._set_phase(f"running {describe_call(call.name, call.args, 60)}")
        self._phase_since = call.started

    def _set_phase(self, phase: str) -> None:
        if phase != self._phase:
            self._phase = phase
            self._phase_since = self.clock()

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Show the status line."""
        self._turn_start = self._phase_since = self.clock()
        if self.live is not None:
            self.live.redraw()

    def tick(self) -> None:
        """Called a few times a second: advance the spinner, redraw a changed open block."""
        if self.live is None or self.live.paused:
            return
        self._frame += 1
        self.answer.refresh(draw=False)
        self.live.redraw()

    def suspend(self) -> None:
        """Take the live lines off the screen (an approval question is about to be asked)."""
        self._close_reasoning()
        self.answer.finish()
        if self.live is not None:
            self.live.clear()
            self.live.paused = True

    def resume(self) -> None:
        """Bring the live lines back after `suspend`."""
        if self.live is not None:
            self.live.paused = False
            self.live.redraw()

    def close(self) -> None:
        """The turn is over (or the view is abandoned): flush text and remove the live lines."""
        self._close_reasoning()
        self.answer.finish()
        for call_id, call in list(self._calls.items()):
            self._header(call.name, call.args, call_id)
            self.print(Text("  ⎿ interrupted", style="yellow"))
        self._calls.clear()
        self._closed = True
        if self.live is not None:
            self.live.paused = False
            self.live.clear()

    # -- events -----------------------------------------------------------------------------------

    def handle(self, ev: Event) -> None:
        """Render one event."""
        if isinstance(ev, ReasoningDelta):
            self._on_reasoning(sanitize(ev.text))
        elif isinstance(ev, ContentDelta):
            self._close_reasoning()
            if ev.text:
                if not self.answer.started:
                    self._section_break("answer")
                self._set_phase("writing")
                self.answer.feed(sanitize(ev.text))  # no control sequences from the model
        elif isinstance(ev, ToolArgumentsDelta):
            self._close_reasoning()
            self.answer.finish()
            self._args_chars += len(ev.text)
            self._set_phase("preparing a tool call")
            self._maybe_redraw()
        elif isinstance(ev, StepStarted):
            self._new_step()
            self._set_phase("waiting for the model")
            self._maybe_redraw()
        elif isinstance(ev, MessageCommitted):
            if ev.message.get("role") == "assistant":
                self._close_reasoning()
                self.answer.finish()
                self.answer = MarkdownStream(self.console, self.live, clock=self.clock)
        elif isinstance(ev, ToolCallStarted):
            self._on_tool_started(ev)
        elif isinstance(ev, ToolOutputDelta):
            if ev.call_id in self._calls:
                self._output[ev.call_id] = (self._output.get(ev.call_id, "") + ev.text)[-LIVE_KEEP:]
                kept = self._so_far.setdefault(ev.call_id, [""])
                if len(kept[0]) < RUNNING_KEEP:  # kept[0]: what came so far, joined every 64 pieces
                    kept.append(ev.text)
                    if len(kept) > 64:
                        kept[:] = ["".join(kept)]
                self._maybe_redraw()
        elif isinstance(ev, ToolCallFinished):
            self._on_tool_finished(ev)
        elif isinstance(ev, PermissionDenied):
            self._denied.add(ev.call_id)
            if self.previewed(ev.call_id):  # refused at the question, which said so in one line
                return
            self._section_break("tools")
            self._header(ev.name, ev.arguments)
            self.print(Text(f"  ⎿ not run: {one_line(ev.reason, 200)}", style="yellow"))
        elif isinstance(ev, Retrying):
            self._on_retry(ev)
        elif isinstance(ev, Notice):
            self._section_break("status")
            style = {"warning": "yellow", "error": "red"}.get(ev.level, "dim")
            mark = {"warning": "!", "error": "✗"}.get(ev.level, "·")
            self.print(Text(f"{mark} {sanitize(ev.text, sequences='escape')}", style=style))
        elif isinstance(ev, UsageUpdated | ContextUpdated):
            if self.on_stats is not None:
                self.on_stats(ev)
        elif isinstance(ev, TurnFinished):
            self._on_finished(ev)
        elif isinstance(ev, SubagentEvent):
            self._on_subagent(ev)

    def _on_subagent(self, ev: SubagentEvent) -> None:
        """A subagent's tool calls and denials, one dim line each under its task (issue 10: visible)."""
        who = one_line(ev.description, 40)
        inner = ev.event
        if isinstance(inner, PermissionDenied):
            call = describe_call(inner.name, inner.arguments, 100)
            self.print(Text(f"    ↳ [{who}] not run: {call} ({one_line(inner.reason, 120)})", style="yellow"))
            return
        for tc in inner.message.get("tool_calls") or ():
            fn = tc.get("function") or {}
            try:
                args = parse_arguments(str(fn.get("arguments") or ""))
            except ValueError:
                args = {}
            shown = describe_call(str(fn.get("name") or "?"), args, 100)
            self.print(Text(f"    ↳ [{who}] {shown}", style="dim"))

    def _maybe_redraw(self) -> None:
        if self.live is None:
            return
        now = self.clock()
        if now - self._last_tick >= 0.1:
            self._last_tick = now
            self.live.redraw()

    def _new_step(self) -> None:
        self._args_chars = 0
        self._reasoning_start = None

    def _on_reasoning(self, text: str) -> None:
        if not text:
            return
        if not self._reasoning_open:
            self._reasoning_open = True
            self._reasoning_start = self.clock()
            self._set_phase("thinking")
            self._section_break("reasoning")
            if self.show_reasoning:
                self.print(Text("✻ Thinking", style="dim bold"))
        if self.show_reasoning:
            self.reasoning.feed(text)
        self._maybe_redraw()

    def _close_reasoning(self) -> None:
        if not self._reasoning_open:
            return
        self._reasoning_open = False
        if self.show_reasoning:
            self.reasoning.finish()
        else:
            took = self.clock() - (self._reasoning_start or self.clock())
            self.print(Text(f"✻ thought for {elapsed(took)}", style="dim"))

    def _header(self, name: str, args: Mapping[str, Any], call_id: str | None = None) -> None:
        key = call_id or f"{name}:{id(args)}"
        if self._last_header == key:
            return
        line = Text("● ", style="cyan")
        head, sep, rest = describe_call(name, args).partition(" ")
        line.append(head, style="bold")
        line.append(sep + rest)
        line.truncate(max(20, self.console.size.width - 1), overflow="ellipsis")
        self.print(line)
        self._last_header = key

    def _on_tool_started(self, ev: ToolCallStarted) -> None:
        self._close_reasoning()
        self.answer.finish()
        self._section_break("tools")
        self._calls[ev.call_id] = _Call(ev.name, ev.arguments, self.clock())
        self._header(ev.name, ev.arguments, ev.call_id)
        self._running(self._calls[ev.call_id])
        if self.live is not None:
            self.live.redraw()

    def _on_tool_finished(self, ev: ToolCallFinished) -> None:
        call = self._calls.pop(ev.call_id, None)
        self._output.pop(ev.call_id, None)
        self._so_far.pop(ev.call_id, None)
        if ev.call_id in self._denied:
            return
        self.last_result = (describe_call(call.name if call else ev.name, call.args if call else {}), ev.content)
        self._section_break("tools")
        if call is None:  # refused before it ran (unknown tool, bad arguments)
            self._header(ev.name, {}, ev.call_id)
            self.print(Text(f"  ⎿ ✗ {one_line(ev.content, 300)}", style="red"))
            return
        self._header(call.name, call.args, ev.call_id)
        execute = self.tool_kind(ev.name) == "execute"
        display = ev.display or {}
        todos, subagent = display.get("todos"), display.get("subagent")
        if isinstance(todos, list) and not ev.is_error:
            self.print(todo_checklist(todos))
        elif isinstance(subagent, Mapping):
            self.print(subagent_line(subagent, ev.is_error))
        elif ev.is_error and not (execute and ev.summary):
            text = ev.content[len("Error: ") :] if ev.content.startswith("Error: ") else ev.content
            self.print(Text(f"  ⎿ ✗ {one_line(text, 300)}", style="red"))
        else:
            summary = _short_summary(ev.summary, describe_call(call.name, call.args)) or one_line(ev.content, 200)
            mark = "✗ " if ev.is_error else ""
            summary = sanitize(summary or "done", sequences="escape", newlines=False)
            self.print(Text(f"  ⎿ {mark}{summary}", style="red" if ev.is_error else "dim"))
            diff = ev.display.get("diff") if ev.display else None
            if isinstance(diff, str) and diff.strip() and not self.previewed(ev.call_id):
                self.print(diff_text(diff, 40, headers=False))
            elif execute:
                body = _STATUS_LINE.sub("", ev.content.rstrip())
                lines, hidden = tail_with_hidden(body, RESULT_LINES, max(20, self.console.size.width - 8))
                if hidden:
                    self.print(Text(more_lines(hidden, key=EXPAND_KEY), style="dim"))
                if lines:
                    self.print(Text("\n".join(f"    {line}" for line in lines), style="dim"))
        if self._calls:
            self._running(next(iter(self._calls.values())))
        else:
            self._set_phase("waiting for the model")
        self._maybe_redraw()

    def _on_retry(self, ev: Retrying) -> None:
        self._close_reasoning()
        kept = self.answer.started
        self.answer.discard()
        self.answer = MarkdownStream(self.console, self.live, clock=self.clock)
        self._section_break("status")
        note = " (the partial answer above will be repeated)" if kept else ""
        self.print(
            Text(
                f"↻ retry {ev.attempt} of {ev.max_retries} in {ev.delay:.1f}s{note}, after: {one_line(ev.error, 160)}",
                style="yellow",
            )
        )
        self._set_phase("retrying")
        self._retry_at = self.clock() + ev.delay  # the status line counts down to it

    def _on_finished(self, ev: TurnFinished) -> None:
        self.close()
        self.finished = ev
        if ev.status != "success":
            self._section_break("status")
        if ev.status == "interrupted":
            self.print(Text("⏹ Interrupted. Type a message to continue from here.", style="yellow"))
        elif ev.status in ("max_turns", "repeat_limit"):
            self.print(
                Text(
                    f"■ {ev.error or 'stopped at the step limit'}. Send 'continue' to let it go on.",
                    style="yellow",
                )
            )
        elif ev.status == "error":
            self.print(Text(f"✗ {ev.error or 'the turn failed'}", style="red"))
            hint = ERROR_HINTS.get(ev.error_kind or "", "Send your message again, or /clear to start over.")
            self.print(Text(f"  {hint}", style="dim"))
        if self.live is not None:
            self.live.clear()


def expanded_result(header: str, content: str, full: bool = True) -> Text:
    """A tool result in full (Ctrl-O), each line made printable."""
    out = Text()
    out.append(f"● {header}{' (full result)' if full else ''}\n", style="bold")
    rows = content.rstrip().splitlines() or ["(empty)"]
    out.append("\n".join(f"    {printable(row)}" for row in rows), style="dim")
    return out


def todo_checklist(items: Sequence[Any], indent: str = "  ⎿ ", more: str = "    ") -> Text:
    """The task list of a todo_write result: ☐ pending, ◐ in progress (bold), ☑ done (dimmed)."""
    out = Text()
    if not items:
        out.append(f"{indent}(the task list is empty)", style="dim")
        return out
    for n, item in enumerate(items[:TODO_SHOWN]):
        entry = item if isinstance(item, Mapping) else {}
        mark, style = TODO_MARKS.get(str(entry.get("status", "pending")), TODO_MARKS["pending"])
        if n:
            out.append("\n")
        out.append(indent if n == 0 else more)
        out.append(f"{mark} {one_line(str(entry.get('content', '')), 200)}", style=style)
    if len(items) > TODO_SHOWN:
        out.append(f"\n{more}… {len(items) - TODO_SHOWN} more", style="dim")
    return out


def subagent_line(info: Mapping[str, Any], is_error: bool) -> Text:
    """One line for a finished subagent (task): its status, steps, time and tokens."""
    status = str(info.get("status", "done"))
    parts = [status if not is_error else f"✗ {status}"]
    steps = info.get("steps")
    if isinstance(steps, int):
        parts.append(f"{steps} step{'s' if steps != 1 else ''}")
    seconds = info.get("seconds")
    if isinstance(seconds, int | float):
        parts.append(f"{seconds:.1f}s")
    usage = info.get("usage")
    if isinstance(usage, Mapping):
        used = int(usage.get("prompt_tokens", 0) or 0) + int(usage.get("completion_tokens", 0) or 0)
        if used:
            parts.append(f"{tokens(used)} tokens")
    return Text("  ⎿ " + " · ".join(parts), style="red" if is_error or status != "success" else "dim")
