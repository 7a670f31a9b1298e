"""Issue 36, finding 7 (polish): `/compact` in the terminal says once, whole and truthfully what it did — no
"Compacted" when the summary made the context larger, and a failed summary's warning printed once, not twice
(once cut off by the "Compacting…" line's erasure)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from terminals import Term
from ui_helpers import output, plain_session

from kimicode.testing import FakeServer, Reply


def talk(session: Any, server: FakeServer, turns: int) -> None:
    """`turns` exchanges of ~800 tokens each: more than the recent turns /compact keeps verbatim, so the
    older ones are folded into a summary."""

    async def go() -> None:
        for i in range(turns):
            server.add(Reply(content=f"answer {i}: " + "the code does this and that. " * 120))
            await session.run_turn(f"question {i}")

    asyncio.run(go())


def compact(session: Any) -> None:
    from kimicode.ui import commands

    asyncio.run(commands.dispatch(session, "/compact"))


def test_a_summary_longer_than_the_history_is_not_called_compacted(
    server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = plain_session(server, workspace, monkeypatch, permission_mode="yolo")
    talk(session, server, 6)
    output(session)
    long_summary = "## Goal\n" + " ".join(f"detail {i} of the questions asked so far." for i in range(1200))
    server.add(Reply(content=long_summary))  # the compaction request is a chat completion like any other
    compact(session)
    text = " ".join(output(session).split())
    assert len(server.requests) == 7 and "question 0" in str(server.requests[-1].body["messages"])  # it summarised
    sizes = re.search(r"~([\d.,k]+) → ~([\d.,k]+) tokens", text)
    assert sizes is not None, text
    assert "Compacted" not in text and "did not shrink" in text  # the honest line instead of the claim
    assert "/rewind or /clear frees more" in text
    asyncio.run(session.agent.aclose())


def test_a_failed_summary_is_said_once_and_whole(
    server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a real screen (pyte, with the transient "Compacting…" row drawn and erased): the summary the model
    returns is refused ("too short to keep"), a summary built from the transcript is kept, and the reason
    appears exactly once, not cut."""
    from kimicode.ui.app import Session, SessionOptions

    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    term = Term(rows=60, cols=100)
    session = Session(
        SessionOptions(workspace=workspace, retry_base_delay=0.01, permission_mode="yolo"), term.console, plain=False
    )
    talk(session, server, 6)
    term.screen.reset()
    server.add(Reply(content="Done."))  # refused as a summary: the fallback is kept and the reason said
    compact(session)
    screen = " ".join(term.text.split())
    reason = "the model's summary was only 5 characters, too short to keep"
    assert screen.count(reason) == 1, term.text
    assert screen.count("summary request failed") == 1, term.text
    assert f"The summary request failed ({reason}); a simpler summary was kept instead." in screen  # whole
    assert "Compacting" not in term.text  # the progress line is gone, and took nothing else with it
    first = term.text.splitlines()[0]
    assert first.startswith("Compacted ") and "messages into a summary: ~" in first  # the outcome first, nothing above
    asyncio.run(session.agent.aclose())
