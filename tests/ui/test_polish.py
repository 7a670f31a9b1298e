"""Polish items of issue 23 left by the everyday pass: each test failed before its fix."""

from __future__ import annotations

import io
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from terminals import Term, stream_into

from kimicode.ui.completion import FileIndex, PromptCompleter


def test_at_completion_waits_for_the_first_listing(tmp_path: Path) -> None:
    """A mention typed in one burst right after start-up asked before the listing was done and got
    nothing (prompt_toolkit does not ask again): the completer waits for the first listing."""
    release = threading.Event()

    def slow_lister(root: Path) -> list[str]:
        release.wait(5)
        return ["src/hello_world.py", "README.md"]

    index = FileIndex(tmp_path, lister=slow_lister)
    index.refresh()
    completer = PromptCompleter(dict, index)
    threading.Timer(0.2, release.set).start()
    found = list(completer.get_completions(Document("explain @hel"), CompleteEvent(text_inserted=True)))
    assert [c.text for c in found] == ["@src/hello_world.py"]


def test_streamed_markdown_has_one_blank_line_between_blocks_and_list_dots() -> None:
    """rich pads code blocks and puts blank rows around tables and lists, so two or three blank lines
    piled up between streamed blocks; an ordered list showed `1` for `1.`."""
    doc = (
        "Intro.\n\n```python\nx = 1\n```\n\nAfter code.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "After table.\n\n1. first\n2. second\n\nEnd."
    )
    for sizes in ([len(doc)], [3]):
        term = Term()
        stream_into(term, doc, sizes)
        assert term.text.split("\n") == [
            "Intro.",
            "",
            " x = 1",
            "",
            "After code.",
            "",
            " a  b",
            " ────",
            " 1  2",
            "",
            "After table.",
            "",
            " 1. first",
            " 2. second",
            "",
            "End.",
        ]


def test_toolbar_says_the_window_is_not_known_until_it_is(
    server: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the first request the toolbar showed the default window as if it were the model's."""
    from rich.console import Console

    from kimicode.ui.app import Session, SessionOptions

    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)

    def toolbar(**options: Any) -> str:
        console = Console(file=io.StringIO(), width=120, color_system=None)
        session = Session(SessionOptions(workspace=workspace, **options), console, plain=True)
        return "".join(text for _, text in session.toolbar())

    unknown = toolbar(model="some-local-model")
    assert "(window not known yet)" in unknown and re.search(r"ctx ~[\d.]+k \(", unknown), unknown
    assert "ctx ~" in toolbar(model="kimi-k3") and "/1.0M" in toolbar(model="kimi-k3")  # a known model's window
    assert "/32.8k" in toolbar(model="some-local-model", context_window=32_768)  # --context-window


def test_batch_bar_stops_the_terminal_echoing_ctrl_c_while_it_is_live() -> None:
    """The `^C` echoed on the bar's line made rich draw the bar a second time on Ctrl-C."""
    import os
    import termios

    from kimicode.cli.batch_progress import Progress

    leader, follower = os.openpty()
    err = os.fdopen(follower, "w", encoding="utf-8")
    try:
        assert termios.tcgetattr(follower)[3] & termios.ECHOCTL
        with Progress(2, fmt="text", out=io.StringIO(), err=err):
            assert not termios.tcgetattr(follower)[3] & termios.ECHOCTL
        assert termios.tcgetattr(follower)[3] & termios.ECHOCTL  # put back afterwards
    finally:
        err.close()
        os.close(leader)


def test_init_previews_show_what_the_user_asked(server: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session list, the resume recap and /rewind showed the start of the internal /init prompt."""
    import asyncio

    from rich.console import Console

    from kimicode.session.store import list_sessions, one_line
    from kimicode.testing import Reply
    from kimicode.ui import commands
    from kimicode.ui.app import Session, SessionOptions
    from kimicode.ui.recap import last_exchange

    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    server.add(Reply(content="AGENTS.md written."))
    session = Session(SessionOptions(workspace=workspace), Console(file=io.StringIO(), width=120), plain=True)

    async def go() -> None:
        await commands.dispatch(session, "/init keep it short")
        await session.agent.aclose()

    asyncio.run(go())
    sent = server.requests[0].body["messages"][-1]["content"]
    assert "Write an `AGENTS.md`" in sent and "keep it short" in sent  # the model still gets the instructions
    prompt, _, _ = last_exchange(session.agent.messages)
    assert prompt == "/init keep it short: write AGENTS.md for this repository"
    listed = [s for s in list_sessions(session.home) if s.id == session.agent.session_id]
    assert one_line(listed[0].first_prompt, 60).startswith("/init keep it short: write AGENTS.md")


def test_the_spinner_times_the_running_command_not_the_turn() -> None:
    """A turn 40 s in showed `(40s · …)` beside a command that had run 2 s, and when one of two parallel
    calls finished the other's time started again from 0."""
    from kimicode.events import ToolCallFinished, ToolCallStarted
    from kimicode.ui.view import TurnView

    now = [100.0]
    term = Term(rows=30, cols=120)
    view = TurnView(term.console, plain=False, show_reasoning=True, clock=lambda: now[0])
    view.start()
    now[0] += 40
    view.handle(ToolCallStarted("a", "bash", {"command": "make test"}))
    now[0] += 3
    view.handle(ToolCallStarted("b", "bash", {"command": "make lint"}))
    now[0] += 2
    view.tick()
    status = term.text
    assert "running bash: make lint… 2s" in status and "45s" not in status, status
    view.handle(ToolCallFinished("a", "bash", "ok", False))
    now[0] += 1
    view.tick()
    status = term.text
    assert "running bash: make lint… 3s" in status and "46s" not in status, status
    view.close()
