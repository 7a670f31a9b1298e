"""todo_write: the list on the agent, its display, and how it survives resume, fork and compaction."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimicode.agent.ecosystem import TODO_HEADER
from kimicode.events import Event, ToolCallFinished
from kimicode.testing import FakeServer, Reply, ToolCall
from kimicode.tools.base import ToolError
from kimicode.tools.todo import TodoList, parse_items

PLAN = [
    {"id": "1", "content": "Read the code", "status": "done"},
    {"id": "2", "content": "Fix the bug", "status": "in_progress"},
    {"id": "3", "content": "Run the tests", "status": "pending"},
]


def test_the_model_keeps_a_list_the_ui_can_render(make_agent: Callable[..., Any], server: FakeServer) -> None:
    events: list[Event] = []
    server.add(Reply(tool_calls=[ToolCall("todo_write", {"todos": PLAN})]), Reply(content="planned"))
    agent = make_agent(on_event=events.append)
    assert "todo_write" in agent.tools.names
    assert agent.run_sync("plan it").ok
    assert [i.status for i in agent.extras.todos.items] == ["done", "in_progress", "pending"]
    finished = next(e for e in events if isinstance(e, ToolCallFinished))
    assert finished.display == {"todos": PLAN} and not finished.is_error
    sent = server.requests[1].body["messages"][-1]["content"]
    assert "Task list (1/3 done):" in sent and "[>] 2. Fix the bug" in sent and "[x] 1. Read the code" in sent


def test_bad_lists_are_refused_and_leave_the_list_alone(make_agent: Callable[..., Any], server: FakeServer) -> None:
    server.add(
        Reply(tool_calls=[ToolCall("todo_write", {"todos": PLAN})]),
        Reply(tool_calls=[ToolCall("todo_write", {"todos": [{"id": "1", "content": "x", "status": "finished"}]})]),
        Reply(content="ok"),
    )
    agent = make_agent()
    agent.run_sync("go")
    result = server.requests[2].body["messages"][-1]["content"]
    assert "status must be one of" in result or "must be one of" in result
    assert len(agent.extras.todos.items) == 3


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (
            [{"id": "1", "content": "a", "status": "pending"}, {"id": "1", "content": "b", "status": "done"}],
            "appears twice",
        ),
        ([{"id": "1", "content": "  ", "status": "pending"}], "content is empty"),
        ("not a list", "must be a list"),
        ([{"id": "1", "content": "a", "status": "completed"}], "status must be one of"),
    ],
)
def test_validation(raw: Any, needle: str) -> None:
    with pytest.raises(ToolError, match=needle):
        parse_items(raw)


def test_survives_resume_and_fork(make_agent: Callable[..., Any], server: FakeServer, tmp_path: Path) -> None:
    from kimicode import Agent

    server.add(Reply(tool_calls=[ToolCall("todo_write", {"todos": PLAN})]), Reply(content="planned"))
    agent = make_agent()
    agent.run_sync("plan")
    resumed = Agent.resume(agent.session_id, base_url=server.base_url, api_key="k", home=tmp_path / "home")
    assert [i.content for i in resumed.extras.todos.items] == [p["content"] for p in PLAN]
    forked = resumed.fork()
    assert forked.extras.todos is not resumed.extras.todos
    assert [i.id for i in forked.extras.todos.items] == ["1", "2", "3"]
    todo = forked.tools.get("todo_write")
    assert todo is not None and getattr(todo.fn, "__self__", None) is forked.extras.todos


def test_rebuilt_from_history_without_a_log() -> None:
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "todo_write", "arguments": '{"todos": []}'}}]},
        {"role": "tool", "tool_call_id": "a", "content": "(the task list is empty)"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "b", "type": "function", "function": {
                "name": "todo_write", "arguments": '{"todos": [{"id": "x", "content": "kept", "status": "done"}]}'}},
            {"id": "c", "type": "function", "function": {
                "name": "todo_write", "arguments": '{"todos": [{"id": "y", "content": "bad", "status": "??"}]}'}}]},
        {"role": "tool", "tool_call_id": "b", "content": "Task list (1/1 done)"},
        {"role": "tool", "tool_call_id": "c", "content": "Error: task y: status must be one of"},
    ]  # fmt: skip
    assert [i.content for i in TodoList.from_history(messages).items] == ["kept"]
    assert TodoList.from_history([]).items == []


def test_reinjected_after_compaction(make_agent: Callable[..., Any], server: FakeServer, tmp_path: Path) -> None:
    from kimicode import Agent

    server.add(Reply(tool_calls=[ToolCall("todo_write", {"todos": PLAN})]), Reply(content="planned"))
    for i in range(4):
        server.add(Reply(content=f"answer {i} " + "padding words " * 400))
    server.add(Reply(content="SUMMARY OF THE WORK: a plan, four steps."))  # a summary of at least 20 characters
    agent = make_agent()
    agent.run_sync("plan")
    for i in range(4):
        agent.run_sync(f"step {i} " + "more text " * 400)
    result = asyncio.run(agent.compact())
    assert result is not None
    calls = [c for m in agent.messages for c in m.get("tool_calls") or ()]
    assert not any(c["function"]["name"] == "todo_write" for c in calls)  # folded into the summary
    summary = next(m for m in agent.messages if TODO_HEADER in str(m.get("content")))
    assert "SUMMARY OF THE WORK" in summary["content"] and "[>] 2. Fix the bug" in summary["content"]
    asyncio.run(agent.aclose())
    resumed = Agent.resume(agent.session_id, base_url=server.base_url, api_key="k", home=tmp_path / "home")
    assert resumed.messages == agent.messages  # the log replays the re-injection
    assert len(resumed.extras.todos.items) == 3
