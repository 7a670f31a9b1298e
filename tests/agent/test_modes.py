"""The model is told the permission mode when it changes: a user note appended to the history, so the
cached prefix (system prompt and earlier messages) is never rewritten."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from kimicode import Agent
from kimicode.agent.modes import mode_note, note_needed, noted_mode
from kimicode.testing import FakeServer, Reply

MakeAgent = Callable[..., Agent]


def notes(messages: list[dict[str, object]]) -> list[str | None]:
    return [noted_mode(m) for m in messages if noted_mode(m) is not None]


def test_a_default_session_hears_nothing_and_each_change_is_told_once(
    server: FakeServer, make_agent: MakeAgent
) -> None:
    server.add(*(Reply(content=f"answer {i}") for i in range(5)))
    agent = make_agent()
    agent.run_sync("one")
    assert notes(server.requests[0].body["messages"]) == []
    agent.permission_mode = "plan"
    agent.run_sync("two")
    agent.run_sync("three")  # same mode: no second note
    agent.permission_mode = "accept-edits"
    agent.run_sync("four")
    agent.permission_mode = "default"
    agent.run_sync("five")
    last = server.requests[-1].body["messages"]
    assert notes(last) == ["plan", "accept-edits", "default"]
    first = server.requests[0].body["messages"]
    assert last[: len(first)] == first  # earlier messages unchanged: the cached prefix holds
    assert last[0] == first[0]  # the system prompt is never rewritten for a mode


def test_starting_in_plan_mode_tells_it_after_the_prompt(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(Reply(content="a plan"))
    agent = make_agent(permission_mode="plan")
    agent.run_sync("investigate")
    sent = server.requests[0].body["messages"]
    assert sent[-2] == {"role": "user", "content": "investigate"}
    assert sent[-1] == mode_note("plan") and "plan" in sent[-1]["content"]


def test_a_resumed_session_is_not_told_again(server: FakeServer, make_agent: MakeAgent, tmp_path: Path) -> None:
    server.add(Reply(content="a plan"), Reply(content="more"))
    agent = make_agent(permission_mode="plan")
    agent.run_sync("investigate")
    asyncio.run(agent.aclose())
    again = Agent.resume(
        agent.session_id,
        base_url=server.base_url,
        api_key="sk-test",
        home=tmp_path / "home",
        permission_mode="plan",
    )
    again.run_sync("go on")
    assert notes(server.requests[-1].body["messages"]) == ["plan"]
    asyncio.run(again.aclose())


def test_a_mode_changed_during_a_turn_is_told_before_the_next_step(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    from kimicode.testing import ToolCall

    (workspace / "a.txt").write_text("x")
    server.add(Reply(tool_calls=[ToolCall("read_file", {"path": "a.txt"})]), Reply(content="done"))
    agent = make_agent()

    async def go() -> None:
        async for ev in agent.stream("read"):
            if type(ev).__name__ == "ToolCallStarted":
                agent.permission_mode = "yolo"

    asyncio.run(go())
    second = server.requests[1].body["messages"]
    assert second[-2]["role"] == "tool" and noted_mode(second[-1]) == "yolo"


def test_look_alike_messages() -> None:
    assert noted_mode({"role": "assistant", "content": "[permission mode: plan] x"}) is None
    assert noted_mode({"role": "user", "content": "[permission mode: root] x"}) is None  # not a mode
    assert noted_mode({"role": "user", "content": [{"type": "text", "text": "[permission mode: plan] "}]}) is None
    assert note_needed([], "default") is None and note_needed([], "plan") == mode_note("plan")
    assert note_needed([mode_note("plan")], "plan") is None
    assert note_needed([], "nonsense") is None
