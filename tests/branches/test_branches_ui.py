"""`/branches N [verify]` on a real terminal Session (plain console): the table, the picker, apply, /undo."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from branches_helpers import BUGGY, GOOD, GOOD_BIG, VERIFY, WRONG, Router, git_project, write_turn
from ui_helpers import answers, plain_session

from kimicode.testing import FakeServer

pytestmark = pytest.mark.prepush  # the branches process (a worker), its overlay and sandbox: the pre-push tier


@pytest.fixture
def session(server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    return plain_session(server, workspace, monkeypatch, width=140, permission_mode="accept-edits")


def typed(monkeypatch: pytest.MonkeyPatch, session: Any, text: str) -> None:
    async def read_input() -> str:
        return text

    monkeypatch.setattr(session, "read_input", read_input)


def test_branches_runs_the_next_prompt_shows_the_table_and_applies_the_picked_branch(
    session: Any, server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimicode.ui import commands

    git_project(workspace)
    Router(server, {"1": write_turn(WRONG), "2": write_turn(GOOD_BIG, "big fix"), "3": write_turn(GOOD, "small")})
    typed(monkeypatch, session, "fix add")
    # the picker lists the proposed (smallest verified) branch first; pick the other verified one instead
    asked = answers(monkeypatch, lambda opts: next(o.value for o in opts if o.value.endswith("-2")), "yes")
    asyncio.run(commands.dispatch(session, f"/branches 3 {VERIFY}"))
    out = session.console.file.getvalue()
    assert "Type the prompt to run in 3 branches" in out
    assert "changed lines" in out and "verified" in out and "failed" in out  # the table
    assert "Proposed:" in out and "(proposed)" in asked[0]
    assert asked[0].index("-3") < asked[0].index("-2")  # proposed first
    assert "+    total = a + b" in out  # the diff of the picked branch
    assert "Applied" in out and (workspace / "app.py").read_text() == GOOD_BIG
    assert session.agent.messages[-1]["content"] == "big fix"  # the session continues from that branch
    asyncio.run(commands.dispatch(session, "/branches"))
    listed = session.console.file.getvalue()
    assert "applied" in listed
    answers(monkeypatch, "files")
    asyncio.run(commands.dispatch(session, "/undo files"))
    assert (workspace / "app.py").read_text() == BUGGY


def test_branches_usage_and_cancel(session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from kimicode.ui import commands
    from kimicode.ui.branches import parse

    assert parse("3 pytest -q") == (3, "pytest -q") and parse("2") == (2, None)
    for bad in ("x", "0", "17", "-1 x"):
        with pytest.raises(ValueError):
            parse(bad)
    asyncio.run(commands.dispatch(session, "/branches"))
    assert "No branches in this session" in session.console.file.getvalue()
    typed(monkeypatch, session, "  ")
    asyncio.run(commands.dispatch(session, "/branches 2"))
    assert "No exploration started" in session.console.file.getvalue()
