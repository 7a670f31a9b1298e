"""Live command output: bash reports what it prints (ToolOutputDelta), the terminal shows its tail under
the running command, every shortened result says how many lines it hides, and Ctrl-O shows it all."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyte
from rich.console import Console

from kimicode import Agent
from kimicode.events import Event, ToolCallFinished, ToolCallStarted, ToolOutputDelta
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.base import ToolContext
from kimicode.tools.progress import ByteReporter, report_output, reporting
from kimicode.tools.shell import bash_tool
from kimicode.ui.format import printable, tail_with_hidden
from kimicode.ui.view import TurnView

MakeAgent = Callable[..., Agent]


def run_events(agent: Agent, prompt: str) -> list[Event]:
    async def go() -> list[Event]:
        return [ev async for ev in agent.stream(prompt)]

    return asyncio.run(go())


def test_bash_streams_its_output_between_start_and_finish(server: FakeServer, make_agent: MakeAgent) -> None:
    script = "for i in 1 2 3; do echo line$i; sleep 0.15; done; echo oops >&2"
    server.add(
        Reply(tool_calls=[ToolCall("bash", {"command": script}), ToolCall("bash", {"command": "true"})]),
        Reply(content="done"),
    )
    events = run_events(make_agent(permission_mode="yolo"), "run")
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    loud, quiet = started[0].call_id, started[1].call_id
    deltas = [e for e in events if isinstance(e, ToolOutputDelta)]
    assert {d.call_id for d in deltas} == {loud}  # `true` printed nothing: no event for it
    assert "".join(d.text for d in deltas) == "line1\nline2\nline3\noops\n"
    assert len(deltas) >= 3  # it arrived while the command ran, not at the end
    i_start = events.index(started[0])
    i_end = next(i for i, e in enumerate(events) if isinstance(e, ToolCallFinished) and e.call_id == loud)
    assert all(i_start < events.index(d) < i_end for d in deltas)
    assert quiet != loud


def test_split_utf8_and_invalid_bytes_are_decoded_whole() -> None:
    got: list[str] = []
    with reporting(got.append):
        live = ByteReporter()
        data = "é🙂".encode() + b"\xff!"
        for i in range(len(data)):
            live.feed(data[i : i + 1])
    assert "".join(got) == "é🙂\ufffd!"


def run_bash(command: str, where: Path) -> Any:
    async def go() -> Any:
        return await bash_tool().fn({"command": command}, ToolContext(workspace=where))

    return asyncio.run(go())


def test_outside_a_tool_call_reporting_is_a_no_op(tmp_path: Path) -> None:
    report_output("nobody listens")  # no error
    out = run_bash("echo hi", tmp_path)
    assert "hi" in str(getattr(out, "content", out))

    calls: list[str] = []

    def broken(text: str) -> None:
        calls.append(text)
        raise RuntimeError("a face with a bug")

    with reporting(broken):
        out = run_bash("echo still", tmp_path)
    assert calls and "still" in str(getattr(out, "content", out))  # a failing listener does not break the tool


def test_tail_counts_the_hidden_lines_blank_ones_included() -> None:
    assert tail_with_hidden("1\n2\n3\n4\n5\n6\n", 5) == (["2", "3", "4", "5", "6"], 1)
    assert tail_with_hidden("1\n\n\n2\n", 5) == (["1", "2"], 0)
    assert tail_with_hidden("a\n\nb\nc\nd\ne\nf", 5) == (["b", "c", "d", "e", "f"], 2)
    assert tail_with_hidden("", 5) == ([], 0)
    assert tail_with_hidden("\x1b[2J\n\x07\n", 5) == ([], 0)  # only control codes: nothing to show


def test_hostile_output_cannot_drive_the_terminal() -> None:
    assert printable("\x1b[2J\x1b[H\x1b]0;pwned\x07ok\x1b[31m!") == "ok!"
    assert printable("10%\r50%\r100%") == "100%"
    assert printable("a\tb\x00c\x7f") == "a   bc"


class Screen:
    """A colour terminal (pyte) behind a rich console, as the turn view writes to it."""

    def __init__(self, cols: int = 80, rows: int = 40) -> None:
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.Stream(self.screen)
        outer = self

        class File(io.StringIO):
            def write(self, s: str) -> int:
                outer.stream.feed(s.replace("\n", "\r\n"))
                return len(s)

        self.console = Console(file=File(), width=cols, height=rows, force_terminal=True, color_system="truecolor")

    @property
    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display).rstrip()


def view_on(screen: Screen) -> TurnView:
    view = TurnView(screen.console, plain=False, show_reasoning=False, tool_kind=lambda n: "execute")
    view.start()
    return view


def test_the_running_command_tail_is_shown_live_then_replaced_by_the_result() -> None:
    screen = Screen()
    view = view_on(screen)
    args: dict[str, Any] = {"command": "make"}
    view.handle(ToolCallStarted("c1", "bash", args))
    view.handle(ToolOutputDelta("c1", "".join(f"step {i}\n" for i in range(1, 7))))
    view.handle(ToolOutputDelta("c1", "\x1b[2Jstep 7 half"))  # a screen clear in the output is not obeyed
    assert view.live is not None
    view.live.redraw()
    text = screen.text
    assert "step 7 half" in text and "step 4" in text and "step 3" not in text  # the last 4 lines
    assert "make" in text
    body = "".join(f"step {i}.\n" for i in range(1, 13))
    view.handle(ToolCallFinished("c1", "bash", body + "[exit code 0]", False, "bash: make (exit 0, 12 lines)"))
    view.close()
    text = screen.text
    assert "… 7 more lines (ctrl+o to expand)" in text
    assert [f"step {i}." in text for i in range(1, 13)] == [False] * 7 + [True] * 5
    assert "step 7 half" not in text  # the live tail is gone
    assert view.expand_last()
    text = screen.text
    assert all(f"step {i}." in text for i in range(1, 13)) and "(full result)" in text


def test_expanding_before_any_result_says_so() -> None:
    view = view_on(Screen())
    assert not view.expand_last()


def test_output_of_an_unknown_call_is_ignored() -> None:
    screen = Screen()
    view = view_on(screen)
    view.handle(ToolOutputDelta("ghost", "boo\n"))
    if view.live:
        view.live.redraw()
    assert "boo" not in screen.text
    view.close()
