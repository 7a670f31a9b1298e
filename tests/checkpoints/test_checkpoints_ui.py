"""`/undo`, `/rewind`, `/diff` on a real terminal Session (plain console), turns from the fake server."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest
from helpers import bash_turn
from rich.console import Console
from ui_helpers import answers, output, plain_session

from kimicode.testing import FakeServer, Reply


@pytest.fixture
def session(server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    return plain_session(server, workspace, monkeypatch, permission_mode="yolo")


@pytest.mark.prepush
def test_undo_diff_and_rewind_in_the_terminal(
    session: Any, server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimicode.ui import commands

    (workspace / "a.txt").write_text("zero\n")

    def run(line: str) -> str:
        asyncio.run(commands.dispatch(session, line))
        return output(session)

    async def turns() -> None:
        bash_turn(server, "echo one > a.txt")
        await session.run_turn("first")
        bash_turn(server, "echo two > a.txt; echo b > b.txt")
        await session.run_turn("second")

    asyncio.run(turns())
    output(session)
    text = run("/diff")
    assert "-zero" in text and "+two" in text and "b.txt" in text
    assert "+one" in run("/diff 1") and "b.txt" not in run("/diff 1")
    assert "takes a turn number" in run("/diff x")

    assert "2 file(s) restored" in run("/undo files")
    assert (workspace / "a.txt").read_text() == "one\n" and not (workspace / "b.txt").exists()
    assert "1 file(s) restored" not in run("/undo")  # undoes the restore itself (files only)
    assert (workspace / "a.txt").read_text() == "two\n" and (workspace / "b.txt").exists()

    (workspace / "a.txt").write_text("mine\n")
    asked = answers(monkeypatch, "1", "both", "no")  # pick turn 1, both, then refuse to overwrite
    text = run("/rewind")
    assert "turn 1: first" in asked[0] and "turn 2: second" in asked[0]
    assert "Changed outside kimicode" in text and "a.txt" in text and "Nothing was restored" in text
    assert (workspace / "a.txt").read_text() == "mine\n"
    n = len(session.agent.messages)
    answers(monkeypatch, "1", "both", "yes")
    run("/rewind")
    assert (workspace / "a.txt").read_text() == "zero\n" and not (workspace / "b.txt").exists()
    assert len(session.agent.messages) == 1 < n
    assert "No turn to rewind" in run("/rewind")
    asyncio.run(session.agent.aclose())


def test_undo_of_a_read_only_turn_takes_only_the_conversation(
    session: Any, server: FakeServer, workspace: Path
) -> None:
    from kimicode.ui import commands

    server.add(Reply(content="hello"))
    asyncio.run(session.run_turn("hi"))
    output(session)
    asyncio.run(commands.dispatch(session, "/undo"))
    assert "taken out of the conversation" in output(session)
    assert [m["role"] for m in session.agent.messages] == ["system"]
    asyncio.run(commands.dispatch(session, "/undo"))
    assert "Nothing to undo" in output(session)
    asyncio.run(session.agent.aclose())


@pytest.mark.prepush
def test_esc_esc_on_an_empty_prompt_opens_rewind(session: Any) -> None:
    from prompt_toolkit.application.current import create_app_session
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    async def read(keys: str) -> str:
        with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
            session._prompt = None
            pipe.send_text(keys)
            text: str = await session.read_input()
            return text

    assert asyncio.run(read("\x1b\x1b")) == "/rewind"
    assert asyncio.run(read("hello\r")) == "hello"


@pytest.mark.prepush
def test_opening_a_terminal_session_stores_the_workspace_ahead_of_the_first_change(
    server: FakeServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warm-up at open (while the user types) records no checkpoint; the first turn that changes a
    file still takes its own, of the workspace as it is then, and /undo uses that one."""
    import time

    from kimicode.ui import commands
    from kimicode.ui.app import Session, SessionOptions

    for i in range(300):
        (workspace / f"f{i}.txt").write_text(f"{i}\n")
    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    console = Console(file=io.StringIO(), width=120, color_system=None, force_terminal=False)
    session = Session(
        SessionOptions(workspace=workspace, retry_base_delay=0.01, permission_mode="yolo"), console, plain=True
    )
    store = session.agent.checkpoints.store
    deadline = time.monotonic() + 30
    while not store.index.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert store.index.exists()
    assert store.git("for-each-ref", "refs/kimicode/") == b""  # warming is not a checkpoint
    (workspace / "f1.txt").write_text("typed in an editor after the warm-up\n")
    bash_turn(server, "echo changed > f2.txt")
    asyncio.run(session.run_turn("change f2"))
    first = session.agent.checkpoints.last
    assert first is not None and first.before and first.changes.modified == ["f2.txt"]
    assert store.git("show", f"{first.before}:f1.txt") == b"typed in an editor after the warm-up\n"
    asyncio.run(commands.dispatch(session, "/undo files"))
    assert (workspace / "f2.txt").read_text() == "2\n"
    asyncio.run(session.agent.aclose())

    (tmp_path / "home" / "config.toml").write_text("[checkpoints]\nwarm_at_open = false\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.txt").write_text("x\n")
    cold = Session(SessionOptions(workspace=other, retry_base_delay=0.01), console, plain=True)
    time.sleep(0.3)
    assert cold.agent.checkpoints is not None and not cold.agent.checkpoints.store.dir.exists()
    asyncio.run(cold.agent.aclose())
