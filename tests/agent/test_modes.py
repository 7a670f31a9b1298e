"""The model is told the permission mode when it changes: a note at the start of the turn's user message (the
user's words last), or after the tool results when it changes mid-turn; the cached prefix (system prompt and
earlier messages) is never rewritten."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import history_problems

from kimicode import Agent
from kimicode.agent.modes import mode_note, mode_text, note_needed, noted_mode, turn_message
from kimicode.prompts import hooks_note, user_words
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


def test_starting_in_plan_mode_tells_it_in_the_system_prompt_or_before_the_prompt(
    server: FakeServer, make_agent: MakeAgent
) -> None:
    server.add(Reply(content="a plan"), Reply(content="a plan"))
    agent = make_agent(permission_mode="plan")
    agent.run_sync("investigate")
    sent = server.requests[0].body["messages"]
    assert sent[-1] == {"role": "user", "content": "investigate"}  # the message is the user's words alone
    assert noted_mode(sent[0]) == "plan" and mode_text("plan") in sent[0]["content"].split("# Environment")[1]
    own = make_agent(permission_mode="plan", system_prompt="You are terse.")  # a caller's prompt is left as given
    own.run_sync("investigate")
    sent = server.requests[1].body["messages"]
    assert sent[-1] == {"role": "user", "content": mode_text("plan") + "\n\ninvestigate"}  # the user's words last
    assert sent[0] == {"role": "system", "content": "You are terse."}
    assert user_words(sent[-1]["content"]) == "investigate"


@pytest.mark.parametrize("mode", ["default", "accept-edits", "plan", "yolo"])
def test_in_every_mode_the_request_ends_with_the_users_words_in_one_message(
    server: FakeServer, make_agent: MakeAgent, mode: str
) -> None:
    """A real model answers the last thing it reads: a note after the prompt was answered instead of it
    (0/6 one-word answers right in accept-edits and yolo on SmolLM2), and two user messages in a row are
    refused by strict servers."""
    server.add(Reply(content="apple"), Reply(content="pear"))
    agent = make_agent(permission_mode=mode)
    agent.run_sync("Reply with exactly one word: apple")
    agent.permission_mode = "yolo" if mode != "yolo" else "plan"
    agent.run_sync("Reply with exactly one word: pear")
    for request, words in zip(server.requests, ("apple", "pear"), strict=True):
        sent = request.body["messages"]
        assert str(sent[-1]["content"]).endswith(f"Reply with exactly one word: {words}")
        assert not history_problems(sent, alternating=True)
        assert user_words(sent[-1]["content"]) == f"Reply with exactly one word: {words}"
    assert notes(server.requests[-1].body["messages"][1:]) == ["yolo" if mode != "yolo" else "plan"]
    assert noted_mode(server.requests[0].body["messages"][0]) == (None if mode == "default" else mode)
    assert server.requests[1].body["messages"][0] == server.requests[0].body["messages"][0]  # the cached prefix


def test_hook_context_goes_before_the_prompt_too() -> None:
    message = turn_message("the prompt", [mode_text("plan"), hooks_note(["branch: main", "CI is red"])])
    assert str(message["content"]).endswith("\n\nthe prompt") and user_words(str(message["content"])) == "the prompt"
    with_image = turn_message(
        [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "x"}}], [mode_text("yolo")]
    )
    assert noted_mode(with_image) == "yolo" and with_image["content"][1]["type"] == "image_url"
    assert user_words("[permission mode: yolo] a prompt that only looks like a note") == (
        "[permission mode: yolo] a prompt that only looks like a note"
    )


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
    assert noted_mode({"role": "user", "content": [{"type": "text", "text": "[permission mode: plan] x"}]}) == "plan"
    assert note_needed([], "default") is None and note_needed([], "plan") == mode_text("plan")
    assert note_needed([mode_note("plan")], "plan") is None
    assert note_needed([], "nonsense") is None


def test_a_session_without_reasoning_resumed_with_another_model_is_not_warned_about_reasoning(
    server: FakeServer, make_agent: MakeAgent, tmp_path: Path
) -> None:
    """Issue 35, finding 7: "its reasoning history came from another model" was said of a session with none."""
    server.add(Reply(content="plain answer"), Reply(content="again"))
    agent = make_agent(model="smollm2-135m")
    agent.run_sync("hello")
    asyncio.run(agent.aclose())
    again = Agent.resume(
        agent.session_id, base_url=server.base_url, api_key="sk-test", home=tmp_path / "home", model="other-model"
    )
    assert again.resume_warning is None
    assert again.run_sync("go on").status == "success"
    asyncio.run(again.aclose())
