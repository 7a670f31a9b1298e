"""Sessions without a prompt are never saved; `-c` continues the last one that has a prompt; sessions record
whether they ran in the terminal, headless or as a library, and `sessions list` shows and filters that."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kimicode import Agent
from kimicode.cli.app import app
from kimicode.session.log import iter_records
from kimicode.session.store import interactive_first, latest_session, list_sessions
from kimicode.testing import FakeServer, Reply

MakeAgent = Callable[..., Agent]


def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "home" / "sessions"


def logs(tmp_path: Path) -> list[Path]:
    d = sessions_dir(tmp_path)
    return sorted(d.glob("*.jsonl")) if d.is_dir() else []


def test_a_session_without_a_prompt_leaves_no_file(make_agent: MakeAgent, tmp_path: Path) -> None:
    for _ in range(3):  # opening and quitting; /clear makes a new Agent, then /exit closes it
        agent = make_agent()
        assert agent.log is not None and not agent.log.saved
        agent.log.sync()
        agent.context_breakdown()  # /context before any prompt
        asyncio.run(agent.aclose())
    assert logs(tmp_path) == []
    assert latest_session(tmp_path / "home") is None


def test_the_first_prompt_writes_everything_held_in_order(
    server: FakeServer, make_agent: MakeAgent, tmp_path: Path
) -> None:
    server.add(Reply(content="hello"))
    before = time.time()
    agent = make_agent()
    result = agent.run_sync("hi")
    assert result.ok
    [path] = logs(tmp_path)
    records = list(iter_records(path))
    kinds = [r["type"] for r in records]
    assert kinds[:3] == ["meta", "message", "message"]  # meta, system prompt, the user's prompt
    assert records[1]["message"]["role"] == "system" and records[2]["message"]["content"] == "hi"
    assert records[0]["ts"] >= round(before, 3) - 0.01  # held records keep the time they happened
    assert records[0]["origin"] == "library"
    assert "sk-test-secret-key" not in path.read_text()


def test_a_failed_first_turn_is_still_saved(server: FakeServer, make_agent: MakeAgent, tmp_path: Path) -> None:
    from kimicode.testing import ErrorReply

    server.add(ErrorReply(400, "bad request"))
    result = make_agent().run_sync("this prompt must not be lost")
    assert result.status == "error"
    [path] = logs(tmp_path)
    assert "this prompt must not be lost" in path.read_text()


def test_origin_is_recorded_and_interactive_wins(server: FakeServer, make_agent: MakeAgent, tmp_path: Path) -> None:
    server.add(Reply(content="a"), Reply(content="b"), Reply(content="c"))
    headless = make_agent(headless=True)
    headless.run_sync("one-shot")
    term = make_agent(origin="interactive")
    term.run_sync("in the terminal")
    by_id = {s.id: s for s in list_sessions(tmp_path / "home")}
    assert by_id[headless.session_id].origin == "headless"
    assert by_id[term.session_id].origin == "interactive"
    # a headless session continued in the terminal counts as interactive from then on
    resumed = Agent.resume(
        headless.session_id, base_url=server.base_url, api_key="k", home=tmp_path / "home", origin="interactive"
    )
    resumed.run_sync("more")
    assert {s.id: s for s in list_sessions(tmp_path / "home")}[headless.session_id].origin == "interactive"


def write_log(directory: Path, sid: str, workspace: Path, *, prompt: str | None, origin: str | None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {
        "v": 1,
        "ts": 0,
        "type": "meta",
        "session_id": sid,
        "model": "kimi-k3",
        "workspace": str(workspace.resolve()),
    }
    if origin is not None:
        meta["origin"] = origin
    lines = [meta, {"v": 1, "ts": 0, "type": "message", "message": {"role": "system", "content": "s"}}]
    if prompt is not None:
        lines.append({"v": 1, "ts": 0, "type": "message", "message": {"role": "user", "content": prompt}})
    path = directory / f"{sid}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_continue_skips_empty_sessions_left_by_older_versions(workspace: Path, tmp_path: Path) -> None:
    d = sessions_dir(tmp_path)
    real = write_log(d, "20260101-000000-aaaaaa", workspace, prompt="real work", origin=None)
    empty = write_log(d, "20260102-000000-bbbbbb", workspace, prompt=None, origin="interactive")
    os.utime(real, (1, 1))  # the empty one is the most recent
    info = latest_session(tmp_path / "home", workspace)
    assert info is not None and info.id == real.stem
    assert [s.id for s in list_sessions(tmp_path / "home")] == [real.stem]
    assert {s.id for s in list_sessions(tmp_path / "home", include_empty=True)} == {real.stem, empty.stem}
    real.unlink()
    assert latest_session(tmp_path / "home", workspace) is None  # only an empty one: nothing to continue


def test_interactive_first_keeps_each_groups_order(workspace: Path, tmp_path: Path) -> None:
    d = sessions_dir(tmp_path)
    kinds = ["headless", "interactive", "headless", None, "interactive", "library"]
    for i, origin in enumerate(kinds):
        os.utime(write_log(d, f"2026010{i}-000000-{i:06d}", workspace, prompt=f"p{i}", origin=origin), (i, i))
    ordered = interactive_first(list_sessions(tmp_path / "home"))
    assert [s.first_prompt for s in ordered] == ["p4", "p1", "p5", "p3", "p2", "p0"]


@pytest.mark.prepush
def test_sessions_list_shows_and_filters_the_origin(workspace: Path, tmp_path: Path) -> None:
    d = sessions_dir(tmp_path)
    write_log(d, "20260101-000000-aaaaaa", workspace, prompt="from ci", origin="headless")
    write_log(d, "20260102-000000-bbbbbb", workspace, prompt="at the desk", origin="interactive")
    write_log(d, "20260103-000000-cccccc", workspace, prompt=None, origin="interactive")
    runner = CliRunner()
    out = runner.invoke(app, ["sessions", "list"])
    assert out.exit_code == 0, out.output
    assert "ORIGIN" in out.output and "headless" in out.output and "interactive" in out.output
    assert "cccccc" not in out.output  # no prompt: not listed
    out = runner.invoke(app, ["sessions", "list", "--origin", "interactive", "--json"])
    rows = [json.loads(line) for line in out.output.splitlines()]
    assert [(r["first_prompt"], r["origin"]) for r in rows] == [("at the desk", "interactive")]
    out = runner.invoke(app, ["sessions", "list", "--all", "--origin", "interactive", "--json"])
    assert len(out.output.splitlines()) == 2
    out = runner.invoke(app, ["sessions", "list", "--origin", "library"])
    assert out.exit_code == 0 and "No saved library sessions" in out.output
    out = runner.invoke(app, ["sessions", "list", "--origin", "robot"])
    assert out.exit_code == 2 and "robot" in out.output


def test_continue_with_only_empty_sessions_is_a_clear_error(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_log(sessions_dir(tmp_path), "20260103-000000-cccccc", workspace, prompt=None, origin="interactive")
    monkeypatch.setenv("KIMI_API_KEY", "k")
    out = CliRunner().invoke(app, ["-c", "-p", "go on", "-C", str(workspace)])
    assert out.exit_code == 2
    assert "no session to continue" in out.output


def test_the_resume_picker_lists_terminal_sessions_first(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import typer

    from kimicode.cli.sessions import pick_session

    d = sessions_dir(tmp_path)
    for i in range(30):  # a CI job's one-shot runs, newer than the one conversation at the desk
        os.utime(
            write_log(d, f"20260102-0000{i:02d}-{i:06d}", workspace, prompt=f"ci run {i}", origin="headless"),
            (100 + i, 100 + i),
        )
    desk = write_log(d, "20260101-000000-aaaaaa", workspace, prompt="at the desk", origin="interactive")
    os.utime(desk, (1, 1))
    monkeypatch.setattr(typer, "prompt", lambda *a, **k: "1")
    assert pick_session(workspace.resolve()) == desk.stem
    rows = capsys.readouterr().err.splitlines()
    assert "at the desk" in rows[2] and "interactive" in rows[2]  # title, header, then the first row
    assert len([r for r in rows if "ci run" in r]) == 19  # the list stays 20 long


def test_a_careless_origin_is_refused(make_agent: MakeAgent) -> None:
    with pytest.raises(ValueError, match="origin must be interactive, headless or library"):
        make_agent(origin="Interactive")


def test_the_terminal_session_saves_nothing_until_a_prompt_and_clear_exit_leaves_nothing(
    server: FakeServer, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from rich.console import Console

    from kimicode.ui import commands
    from kimicode.ui.app import Session, SessionOptions

    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    server.add(Reply(content="hello"))

    def session() -> Session:
        console = Console(file=io.StringIO(), width=100, color_system=None, force_terminal=False)
        return Session(SessionOptions(workspace=workspace, retry_base_delay=0.01), console, plain=True)

    async def open_and_quit() -> None:
        s = session()
        await commands.dispatch(s, "/context")
        await commands.dispatch(s, "/exit")
        await s.agent.aclose()

    asyncio.run(open_and_quit())
    assert logs(tmp_path) == []

    async def talk_clear_exit() -> str:
        s = session()
        await s.run_turn("hi there")
        first = s.agent.session_id
        await commands.dispatch(s, "/clear")
        await commands.dispatch(s, "/exit")
        await s.agent.aclose()
        return first

    first = asyncio.run(talk_clear_exit())
    assert [p.stem for p in logs(tmp_path)] == [first]  # the cleared-to session had no prompt: no file
    [info] = list_sessions(tmp_path / "home")
    assert info.origin == "interactive" and info.first_prompt == "hi there"
