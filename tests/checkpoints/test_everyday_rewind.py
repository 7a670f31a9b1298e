"""Issue 23, defect 1: `/rewind` puts back the files of the turns it rewinds, even from a turn that changed
none; a turn whose files a files-only `/undo` put back can still be rewound in the conversation; and
`kimicode undo` says what it undid when that was an earlier restore."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from helpers import bash_turn, invoke
from ui_helpers import answers, output, plain_session

from kimicode.testing import FakeServer, Reply


@pytest.fixture
def session(server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A terminal Session on a plain console, in yolo mode."""
    return plain_session(server, workspace, monkeypatch, permission_mode="yolo")


def run(session: Any, line: str) -> str:
    from kimicode.ui import commands

    asyncio.run(commands.dispatch(session, line))
    return output(session)


def test_rewind_to_a_turn_without_file_changes_restores_the_later_turns_files(
    session: Any, server: FakeServer, workspace: Path, monkeypatch: Any
) -> None:
    (workspace / "a.txt").write_text("zero\n")

    async def turns() -> None:
        server.add(Reply(content="just talking"))
        await session.run_turn("explain the code")  # turn 1: no files
        bash_turn(server, "echo one > a.txt; echo new > b.txt")
        await session.run_turn("change things")  # turn 2: files
        server.add(Reply(content="ok"))
        await session.run_turn("thanks")  # turn 3: no files

    asyncio.run(turns())
    output(session)
    asked = answers(monkeypatch, "1", "both")  # Esc Esc → turn 1; it asks now: files and conversation
    text = run(session, "/rewind")
    assert len(asked) == 2 and "Restore the files" in asked[1]
    assert (workspace / "a.txt").read_text() == "zero\n" and not (workspace / "b.txt").exists()
    assert "2 file(s) restored" in text and "Undid turn 1" in text
    flat = " ".join(text.split())
    assert "taken out of the conversation. /undo again" in flat or "). /undo again" in flat  # a sentence break
    assert [m["role"] for m in session.agent.messages] == ["system"]
    asyncio.run(session.agent.aclose())


@pytest.mark.prepush
def test_rewind_after_a_files_only_undo_still_takes_the_turn_out(
    session: Any, server: FakeServer, workspace: Path, monkeypatch: Any
) -> None:
    async def turns() -> None:
        bash_turn(server, "echo one > a.txt")
        await session.run_turn("first")

    asyncio.run(turns())
    assert "1 file(s) restored" in run(session, "/undo files")
    assert not (workspace / "a.txt").exists()
    asked = answers(monkeypatch, "1")  # the files are back already: only the conversation is left
    text = run(session, "/rewind")
    assert "No turn to rewind" not in text and "files already undone" in asked[0]
    assert "message(s) taken out of the conversation" in text
    assert [m["role"] for m in session.agent.messages] == ["system"]
    assert not (workspace / "a.txt").exists()
    assert "Nothing to undo" in run(session, "/undo")  # the restore went with the turn it undid
    asyncio.run(session.agent.aclose())


@pytest.mark.prepush
def test_kimicode_undo_of_a_restore_names_it(server: FakeServer, make_agent: Any, workspace: Path) -> None:
    agent = make_agent(permission_mode="yolo")
    bash_turn(server, "echo one > a.txt")
    assert agent.run_sync("first").ok
    code, _, err = invoke("undo", "--session", agent.session_id, "--files-only")
    assert code == 0 and "turn 1" in err and not (workspace / "a.txt").exists()
    code, out, err = invoke("undo", "--session", agent.session_id)
    assert code == 0, err
    assert "restore 1 (undo of turn 1), so the files of turn 1 are back" in err
    assert (workspace / "a.txt").read_text() == "one\n" and "restored a.txt" in out
