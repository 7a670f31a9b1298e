"""/skills and /trust in the terminal session, and `/NAME` starting a skill."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kimicode.testing import FakeServer, Reply


def session(server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from kimicode.ui.app import Session, SessionOptions

    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    console = Console(file=io.StringIO(), width=120, color_system=None, force_terminal=False)
    return Session(SessionOptions(workspace=workspace, retry_base_delay=0.01), console, plain=True)


def output(s: Any) -> str:
    value: str = s.console.file.getvalue()
    s.console.file.seek(0)
    s.console.file.truncate()
    return value


def test_skills_are_listed_and_started_with_their_name(
    server: FakeServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimicode.ui import commands

    folder = tmp_path / "home" / "skills" / "release"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: release\ndescription: Cut a release.\n---\nBump, tag, push.\n")
    server.add(Reply(content="Released."))
    s = session(server, workspace, monkeypatch)

    async def go() -> None:
        await commands.dispatch(s, "/skills")
        await commands.dispatch(s, "/release 2.1")
        await s.agent.aclose()

    asyncio.run(go())
    text = output(s)
    assert "/release  Cut a release. (user)" in text and "Released." in text
    sent = server.requests[0].body["messages"][-1]["content"]
    assert "Bump, tag, push." in sent and sent.endswith("2.1")


def test_trust_shows_and_changes_the_state_and_reopens_the_session(
    server: FakeServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimicode.ui import commands

    (workspace / ".claude" / "commands").mkdir(parents=True)
    (workspace / ".claude" / "commands" / "ship.md").write_text("Ship $ARGUMENTS.\n")
    server.add(Reply(content="one"))
    s = session(server, workspace, monkeypatch)
    assert "ship" not in s.custom_commands()

    async def go() -> None:
        await s.run_turn("remember 7")
        await commands.dispatch(s, "/trust")
        await commands.dispatch(s, "/trust on")
        await commands.dispatch(s, "/trust maybe")
        await s.agent.aclose()

    asyncio.run(go())
    text = output(s)
    assert "is not trusted. It brings:" in text and "command .claude/commands/ship.md" in text
    assert "now trusted; the session was reopened" in text and "Usage: /trust [on|off]" in text
    assert s.agent.settings.trusted and len(s.agent.messages) >= 2  # the same conversation, trusted now
    s._custom_loaded = -1e9  # re-read the command folders now
    assert "ship" in s.custom_commands()
    config = (tmp_path / "home" / "config.toml").read_text()
    assert json.dumps(str(workspace.resolve())) in config


def test_a_commands_allowed_tools_hold_for_its_turn_only(
    server: FakeServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kimicode.testing import ToolCall
    from kimicode.ui import commands

    folder = tmp_path / "claude-home" / "commands"
    folder.mkdir(parents=True)
    (folder / "mark.md").write_text("---\nallowed-tools: Bash(touch:*), Bash(\n---\nMark it.\n")
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "touch marked"})]), Reply(content="Marked."))
    s = session(server, workspace, monkeypatch)
    asked: list[Any] = []
    s.agent.approve = lambda req: asked.append(req) or False
    before = s.agent.policy

    async def go() -> None:
        await commands.dispatch(s, "/mark")
        await s.agent.aclose()

    asyncio.run(go())
    assert (workspace / "marked").exists() and not asked  # allowed without a question, inside its turn
    assert s.agent.policy.rules.allow == before.rules.allow  # and gone afterwards
    assert "allowed-tools 'Bash(' ignored" in output(s)
