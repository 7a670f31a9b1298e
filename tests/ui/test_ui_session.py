"""The terminal UI's turn view and its slash commands on a real session (against the fake server), without
a terminal (approvals, completion, toolbar and settings: test_ui_parts.py)."""

from __future__ import annotations

import asyncio
import io
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from rich.console import Console
from ui_helpers import PNG, output, plain_session

from kimicode.events import (
    ContentDelta,
    Event,
    MessageCommitted,
    Notice,
    PermissionDenied,
    ReasoningDelta,
    Retrying,
    StepStarted,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    UsageUpdated,
)
from kimicode.session.store import SessionError
from kimicode.testing import FakeServer, Reply
from kimicode.ui.completion import FileIndex, PromptCompleter
from kimicode.ui.recap import last_exchange, recap
from kimicode.ui.view import TurnView

# -- the turn view ----------------------------------------------------------------------------------


def plain_view(**kwargs: Any) -> tuple[TurnView, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None, force_terminal=False)
    kinds = {"bash": "execute", "write_file": "edit", "read_file": "read"}
    return TurnView(console, plain=True, tool_kind=kinds.get, **kwargs), out


def test_turn_view_renders_each_kind_of_event() -> None:
    stats: list[Any] = []
    view, out = plain_view(show_reasoning=False, on_stats=stats.append)
    events: list[Event] = [
        StepStarted(1),
        ReasoningDelta("hidden thoughts"),
        ContentDelta("I will **run** it."),
        MessageCommitted({"role": "assistant", "content": "I will run it."}),
        ToolCallStarted("c1", "bash", {"command": "pytest -q"}),
        ToolCallFinished(
            "c1", "bash", "line1\nline2\n3 passed\n[exit code: 0]", False, "bash: pytest -q (exit 0, 3 lines)"
        ),
        ToolCallStarted("c5", "bash", {"command": "make"}),
        ToolCallFinished("c5", "bash", "cc failed\n[exit code: 2]", True, "bash: make (exit 2, 1 line)"),
        ToolCallStarted("c2", "write_file", {"path": "a.py", "content": "x\n"}),
        ToolCallFinished(
            "c2",
            "write_file",
            "Created",
            False,
            "write a.py (created, 1 lines)",
            {"diff": "--- /dev/null\n+++ b/a.py\n@@ -0,0 +1 @@\n+x\n"},
        ),
        PermissionDenied("c3", "bash", {"command": "rm -rf /"}, "bash runs commands"),
        ToolCallFinished("c3", "bash", "Permission denied", True, "bash: error"),
        ToolCallFinished("c4", "nosuch", "Unknown tool 'nosuch'. Available tools: bash.", True, "nosuch: error"),
        Retrying(1, 5, 0.5, "HTTP 503: down"),
        Notice("context compacted", "info"),
        UsageUpdated(10, 2, 5, 10, 2, 5),
        TurnFinished("error", "", 2, "HTTP 400: too long", "context_length"),
    ]
    for ev in events:
        view.handle(ev)
    text = out.getvalue()
    assert "hidden thoughts" not in text and re.search(r"✻ thought for \d+s", text)
    assert "I will **run** it." in text
    assert "● bash: pytest -q\n  ⎿ exit 0, 3 lines\n    line1\n    line2\n    3 passed\n● bash: make" in text
    assert "● bash: make\n  ⎿ ✗ exit 2, 1 line\n    cc failed\n" in text
    assert "● write_file a.py (1 line)\n  ⎿ write a.py (created, 1 lines)\n    @@ -0,0 +1 @@\n    +x" in text
    assert "● bash: rm -rf /\n  ⎿ not run: bash runs commands" in text
    assert text.count("rm -rf /") == 1  # the refused call's error result is not shown again
    assert "● nosuch\n  ⎿ ✗ Unknown tool 'nosuch'." in text
    assert "↻ retry 1 of 5 in 0.5s, after: HTTP 503: down" in text  # the server's words last (issue 23)
    assert "· context compacted" in text
    assert "✗ HTTP 400: too long" in text and "/compact" in text
    assert len(stats) == 1


def test_turn_view_renders_the_task_list_and_subagents() -> None:
    view, out = plain_view(show_reasoning=True)
    todos = [
        {"id": "1", "content": "Write the parser", "status": "done"},
        {"id": "2", "content": "Add tests", "status": "in_progress"},
        {"id": "3", "content": "Update docs", "status": "pending"},
    ]
    view.handle(ToolCallStarted("t1", "todo_write", {"todos": todos}))
    view.handle(ToolCallFinished("t1", "todo_write", "Task list", False, "todos: 1/3 done", {"todos": todos}))
    sub = {
        "description": "explore the parser",
        "status": "success",
        "steps": 4,
        "tools": ["read_file"],
        "usage": {"prompt_tokens": 1500, "completion_tokens": 200, "cached_tokens": 0},
        "seconds": 3.2,
    }
    view.handle(ToolCallStarted("t2", "task", {"description": "explore the parser", "prompt": "look around"}))
    view.handle(ToolCallFinished("t2", "task", "The parser lives in p.py", False, "task: success", {"subagent": sub}))
    failed = {**sub, "status": "max_turns", "steps": 50}
    view.handle(ToolCallStarted("t3", "task", {"description": "run the tests", "prompt": "run them"}))
    view.handle(ToolCallFinished("t3", "task", "The subagent did not finish", True, "task", {"subagent": failed}))
    text = out.getvalue()
    assert "● todo_write (3 tasks)\n  ⎿ ☑ Write the parser\n    ◐ Add tests\n    ☐ Update docs\n" in text
    assert "● task: explore the parser\n  ⎿ success · 4 steps · 3.2s · 1.7k tokens\n" in text
    assert "● task: run the tests\n  ⎿ ✗ max_turns · 50 steps · 3.2s · 1.7k tokens" in text
    assert "The parser lives in p.py" not in text  # the subagent's answer is for the model


def test_recap_shows_the_last_prompt_and_answer() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "system prompt"},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": 'explain this\n\n<file path="a.py">\nprint(1)\n</file>'},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "x", "function": {"name": "read_file"}}]},
        {"role": "tool", "tool_call_id": "x", "content": "image attached"},
        {"role": "user", "content": [{"type": "text", "text": "[Images returned by read_file (x)]"}]},
        {"role": "assistant", "content": "line1\nline2\nline3\nline4\nline5\nline6"},
    ]
    prompt, answer, prompts = last_exchange(messages)
    assert prompt == "explain this" and answer is not None and answer.startswith("line1") and prompts == 2
    console = Console(file=io.StringIO(), width=80, color_system=None, force_terminal=False)
    for item in recap(messages, "Resumed session abc"):
        console.print(item)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "Resumed session abc (2 prompts so far)\n  › explain this\n  ● line1\n    line2" in text
    assert "line5" not in text and "… 2 more lines" in text
    unanswered = recap([*messages, {"role": "user", "content": "and then?"}], "Resumed session abc")
    assert [str(t) for t in unanswered[1:]] == ["  › and then?", "  (no answer to it yet)"]
    assert [str(t) for t in recap(messages[:1], "Resumed")] == ["Resumed (0 prompts so far)", "  (no messages yet)"]


def test_turn_view_interruption_closes_running_calls() -> None:
    view, out = plain_view(show_reasoning=True)
    view.handle(ReasoningDelta("step one\nstep "))
    view.handle(ReasoningDelta("two"))
    view.handle(ToolCallStarted("c1", "bash", {"command": "sleep 30"}))
    view.handle(TurnFinished("interrupted", "", 1, "interrupted by user"))
    text = out.getvalue()
    assert "✻ Thinking\nstep one\nstep two\n" in text
    assert "● bash: sleep 30\n  ⎿ interrupted" in text
    assert "Interrupted." in text


# -- slash commands on a real session ---------------------------------------------------------------


@pytest.fixture
def session_factory(
    server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Callable[[], Any]:
    return lambda: plain_session(server, workspace, monkeypatch)


def test_slash_commands(session_factory: Callable[[], Any], tmp_path: Path) -> None:
    from kimicode.ui import commands

    session = session_factory()

    def run(line: str) -> str:
        assert commands.looks_like_command(line)
        asyncio.run(commands.dispatch(session, line))
        return output(session)

    assert not commands.looks_like_command("/usr/bin/env is broken")
    assert "Did you mean /context?" in run("/contxt")
    assert "/thinking low|high|max" in run("/help")
    assert "kimi-k2-turbo" in run("/model kimi-k2-turbo") and session.agent.endpoint.model == "kimi-k2-turbo"
    assert "takes low, high or max" in run("/thinking extreme")
    run("/thinking max")
    assert session.agent.thinking == "max"
    run("/permissions accept-edits")
    assert session.agent.permission_mode == "accept-edits"
    assert "takes default, accept-edits, plan, yolo" in run("/permissions everything")
    session.rules.commands.add("make")
    assert "command: make" in run("/permissions")
    text = run("/context")
    assert "system prompt" in text and "tool definitions" in text and "estimate" in text
    assert "0 input tokens" in run("/cost")
    old_id = session.agent.session_id
    text = run("/clear")
    assert session.agent.session_id != old_id and "forgotten" in text and not session.rules.commands
    assert session.agent.permission_mode == "accept-edits" and session.agent.thinking == "max"
    run("/reasoning hide")
    assert tomllib.loads((tmp_path / "home" / "config.toml").read_text()) == {"ui": {"reasoning": "hide"}}
    run("/exit")
    assert session.exit_requested


def test_init_and_a_turn_through_the_session(
    session_factory: Callable[[], Any], server: FakeServer, workspace: Path
) -> None:
    from kimicode.ui import commands

    (workspace / "notes.md").write_text("remember this\n")
    server.add(Reply(content="AGENTS.md written."), Reply(content="Seen."))
    session = session_factory()

    async def go() -> None:
        await commands.dispatch(session, "/init")
        await session.run_turn("check @notes.md")
        await session.agent.aclose()

    asyncio.run(go())
    text = output(session)
    first = server.requests[0].body["messages"][-1]["content"]
    assert "AGENTS.md" in first and "Write an `AGENTS.md`" in first
    assert "AGENTS.md written." in text and "Seen." in text
    assert "remember this" in server.requests[1].body["messages"][-1]["content"]
    assert "+ attached notes.md (1 lines)" in text


def test_custom_commands_in_help_completion_and_dispatch(
    session_factory: Callable[[], Any], server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    from kimicode.ui import commands

    project = workspace / ".kimicode" / "commands"
    project.mkdir(parents=True)
    (project / "review.md").write_text(
        "---\ndescription: Review the staged changes\nargument-hint: [focus]\n---\n"
        "Review the staged changes. Focus on $ARGUMENTS.\n"
    )
    (project / "model.md").write_text("This text is never sent: the built-in /model wins.\n")
    mine = tmp_path / "home" / "commands" / "git"
    mine.mkdir(parents=True)
    (mine / "commit.md").write_text("Write a commit message for the staged changes.\n")
    server.add(Reply(content="Reviewed."), Reply(content="Committed."))
    assert "review" not in session_factory().custom_commands()  # a project's commands need a trusted workspace
    (tmp_path / "home" / "config.toml").write_text(f'[trust]\nworkspaces = ["{workspace}"]\n')
    session = session_factory()

    asyncio.run(commands.dispatch(session, "/help"))
    help_text = output(session)
    assert re.search(r"/review \[focus\] +Review the staged changes +project", help_text)
    assert re.search(r"/git:commit +Write a commit message for the staged changes. +user", help_text)
    assert "/model (.kimicode/commands/model.md) is not available: the built-in /model wins" in help_text

    infos = commands.command_infos(session)
    assert infos["review"].summary == "Review the staged changes (project)"
    assert infos["model"].summary == "show or switch the model"  # the built-in, not the file
    completer = PromptCompleter(lambda: infos, FileIndex(workspace, lister=lambda root: []))
    shown = [c.text for c in completer.get_completions(Document("/re"), CompleteEvent())]
    assert shown == ["/reasoning", "/resume", "/review", "/rewind"]
    assert commands.looks_like_command("/git:commit", session.custom_commands())
    assert not commands.looks_like_command("/9lives", session.custom_commands())

    async def go() -> None:
        await commands.dispatch(session, "/review error handling")
        await commands.dispatch(session, "/GIT:commit")
        await commands.dispatch(session, "/model")
        await commands.dispatch(session, "/revew")
        await session.agent.aclose()

    asyncio.run(go())
    text = output(session)
    assert server.requests[0].body["messages"][-1]["content"] == "Review the staged changes. Focus on error handling."
    assert server.requests[1].body["messages"][-1]["content"] == "Write a commit message for the staged changes."
    assert len(server.requests) == 2  # /model ran the built-in
    assert "/review: Review the staged changes" in text and "Reviewed." in text and "Committed." in text
    assert "Model: kimi-k3" in text and "Did you mean /review?" in text


def test_sessions_and_resume_in_place(session_factory: Callable[[], Any], server: FakeServer) -> None:
    from kimicode.ui import commands

    server.add(Reply(content="I will remember 7."), Reply(content="Another answer."), Reply(content="It was 7."))
    session = session_factory()
    seen: dict[str, str] = {}

    async def go() -> None:
        await session.run_turn("Remember the number 7.")
        seen["first"] = session.agent.session_id
        await commands.dispatch(session, "/clear")
        await session.run_turn("Another topic")
        seen["second"] = session.agent.session_id
        output(session)
        for name, line in (
            ("listing", "/sessions"),
            ("unknown", "/resume nosuch"),
            ("same", f"/resume {seen['second']}"),
            ("resumed", f"/resume {seen['first'][:-1]}"),
        ):
            await commands.dispatch(session, line)
            seen[name] = output(session)
        await session.run_turn("Which number was it?")
        await session.agent.aclose()

    asyncio.run(go())
    first, second = seen["first"], seen["second"]
    listing = seen["listing"]
    assert first in listing and second in listing and "Remember the number 7." in listing
    assert re.search(rf"{second} .*Another topic ◀ current", listing)
    assert "Could not resume nosuch: no session 'nosuch'" in seen["unknown"]
    assert f"Already in session {second}" in seen["same"]
    assert (
        f"Resumed session {first} (1 prompt so far)\n  › Remember the number 7.\n  ● I will remember 7."
        in (seen["resumed"])
    )
    assert session.agent.session_id == first
    last = server.requests[-1].body["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user"]
    assert last[1]["content"] == "Remember the number 7." and last[-1]["content"] == "Which number was it?"


def test_opening_on_the_latest_session_or_a_fork_with_rules(
    server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kimicode import Agent
    from kimicode.ui.app import LATEST, Session, SessionOptions
    from kimicode.ui.launch import run_interactive

    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)

    def open_session(**options: Any) -> Any:
        console = Console(file=io.StringIO(), width=120, color_system=None, force_terminal=False)
        return Session(SessionOptions(retry_base_delay=0.01, **options), console, plain=True)

    with pytest.raises(SessionError, match="no session to continue in"):
        open_session(workspace=workspace, resume=LATEST)
    assert run_interactive(workspace=workspace, resume="nosuch") == 2
    assert "kimicode: no session 'nosuch'" in capsys.readouterr().err
    assert run_interactive(workspace=workspace, fork=True) == 2
    assert "--fork needs a session" in capsys.readouterr().err

    server.add(Reply(content="Noted."))
    first = Agent(workspace=workspace).run_sync("Remember the number 7.")
    latest = open_session(workspace=workspace, resume=LATEST, allow=("bash(git status)",), deny=("bash(rm*)",))
    agent = latest.agent
    assert agent.session_id == first.session_id and latest.opened == "resumed"
    assert [str(r) for r in agent.policy.rules.allow] == ["bash(git status)"]
    assert [str(r) for r in agent.policy.rules.deny] == ["bash(rm*)"]
    latest.banner()
    text = output(latest)
    assert f"Resumed session {first.session_id}" in text and "› Remember the number 7." in text and "● Noted." in text

    forked = open_session(resume=first.session_id, fork=True, sandbox="workspace-write")  # no workspace: the session's
    assert forked.agent.session_id != first.session_id and forked.forked_from == first.session_id
    assert forked.workspace == workspace.resolve()
    assert forked.agent.sandbox is not None or forked.agent.sandbox_warning  # the sandbox was asked for
    forked.banner()
    text = output(forked)
    assert f"Forked session {first.session_id} into {forked.agent.session_id}" in text
    if forked.agent.sandbox_warning:
        flat = " ".join(text.split())  # Rich wraps the long warning at the console's width
        assert " ".join(f"! {forked.agent.sandbox_warning}".split()) in flat
    for s in (latest, forked):
        asyncio.run(s.agent.aclose())


def test_image_mentions_are_sent_as_images(
    session_factory: Callable[[], Any], server: FakeServer, workspace: Path
) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    server.add(Reply(content="A tiny image."), Reply(content="Text only."))
    session = session_factory()

    async def go() -> None:
        await session.run_turn("what is in @shot.png?")
        session.agent.set_model("kimi-k2-turbo")  # a model that does not see images
        await session.run_turn("and in @shot.png now?")
        await session.agent.aclose()

    asyncio.run(go())
    text = output(session)
    content = server.requests[0].body["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "what is in @shot.png?"}
    assert content[1]["type"] == "image_url" and content[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert f"+ attached image shot.png ({len(PNG)} B)" in text
    assert server.requests[1].body["messages"][-1]["content"] == "and in @shot.png now?"
    assert "! shot.png not attached: the current model (kimi-k2-turbo) cannot see images" in text


def test_cost_with_configured_prices(session_factory: Callable[[], Any], server: FakeServer, tmp_path: Path) -> None:
    from kimicode.ui import commands

    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[models.kimi-k3]\nprices = { input = 1.0, cached_input = 0.5, output = 4.0 }\n")
    usage = {"prompt_tokens": 100_000, "completion_tokens": 10_000, "total_tokens": 110_000, "cached_tokens": 50_000}
    server.add(Reply(content="hi", usage=usage))
    session = session_factory()
    assert session.cost() == 0.0

    async def go() -> None:
        await session.run_turn("hello")
        await commands.dispatch(session, "/cost")
        await session.agent.aclose()

    asyncio.run(go())
    assert session.cost() == pytest.approx(0.115)  # 50k at $1 + 50k cached at $0.5 + 10k out at $4, per million
    assert "$0.115" in "".join(text for _, text in session.toolbar())
    text = output(session)
    assert (
        "Cost: about $0.115 (kimi-k3 prices per million tokens: input $1, cached input $0.5, output $4; "
        "from config.toml)." in text
    )


def test_cost_without_reported_usage_says_so_not_that_no_price_is_known(
    session_factory: Callable[[], Any], server: FakeServer, tmp_path: Path
) -> None:
    """A priced model whose server sent no usage: the cost is unknown (not $0), and /cost gives that reason,
    not the hint for a model without prices."""
    from kimicode.ui import commands

    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[models.kimi-k3]\nprices = { input = 1.0, output = 4.0 }\n")
    server.add(Reply(content="hi", usage_mode="none"))
    session = session_factory()

    async def go() -> None:
        await session.run_turn("hello")
        await commands.dispatch(session, "/cost")
        await session.agent.aclose()

    asyncio.run(go())
    assert session.cost() is None
    text = output(session)
    assert "Cost: not shown: the server reported no token usage" in text and "no price is known" not in text
