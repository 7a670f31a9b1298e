"""An answer the user interrupts stays in the history, marked, byte for byte (library and session level)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kimicode import Agent
from kimicode.agent.interrupted import INTERRUPTED_MARK, interrupted_answer, is_interrupted_answer
from kimicode.events import ContentDelta, MessageCommitted, Retrying, ToolArgumentsDelta, TurnFinished
from kimicode.session.log import load
from kimicode.testing import ErrorReply, FakeServer, Reply, ToolCall
from kimicode.ui.recap import last_exchange, recap

MakeAgent = Callable[..., Agent]

ODD = "Étape 1 — naïve 🙂 \\n not a newline, tab\there,  trailing spaces   \n```py\nx = '\"'\n"
"""Partial text a careless serializer would mangle: non-ASCII, escapes, quotes, an open code fence."""


def interrupt_after(agent: Agent, prompt: str, when: Callable[[Any, list[Any]], bool]) -> list[Any]:
    async def go() -> list[Any]:
        events: list[Any] = []
        async for ev in agent.stream(prompt):
            events.append(ev)
            if when(ev, events):
                agent.interrupt()
        return events

    return asyncio.run(go())


def streamed_text(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, ContentDelta))


def test_partial_answer_is_kept_marked_and_sent_back_byte_for_byte(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(Reply(content=ODD * 40, chunk_size=9, chunk_delay=0.01), Reply(content="continuing"))
    agent = make_agent()
    events = interrupt_after(agent, "write", lambda ev, evs: isinstance(ev, ContentDelta) and len(evs) > 12)
    finished = events[-1]
    assert isinstance(finished, TurnFinished) and finished.status == "interrupted"
    seen = streamed_text(events)
    assert 0 < len(seen) < len(ODD * 40)
    kept = agent.messages[-1]
    assert kept == {"role": "assistant", "content": seen + INTERRUPTED_MARK}
    assert is_interrupted_answer(kept)
    committed = [e.message for e in events if isinstance(e, MessageCommitted)]
    assert committed[-1] == kept  # faces see it like any other message
    assert finished.result == kept["content"]

    result = agent.run_sync("continue")
    assert result.status == "success" and result.result == "continuing"
    sent = server.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[2] == {"role": "assistant", "content": seen + INTERRUPTED_MARK}  # exactly what was shown


def test_the_session_log_keeps_it_and_a_resumed_session_shows_it(
    server: FakeServer, make_agent: MakeAgent, tmp_path: Any
) -> None:
    server.add(Reply(content="1. first point\n2. second point\n" * 30, chunk_size=6, chunk_delay=0.01))
    agent = make_agent()
    interrupt_after(agent, "list", lambda ev, evs: isinstance(ev, ContentDelta) and len(evs) > 10)
    kept = agent.messages[-1]
    asyncio.run(agent.aclose())

    assert agent.log is not None
    assert load(agent.log.path).messages[-1] == kept

    resumed = Agent.resume(
        agent.session_id, base_url=server.base_url, api_key="sk-test", home=tmp_path / "home", retry_base_delay=0.01
    )
    assert resumed.messages[-1] == kept
    prompt, answer, _ = last_exchange(resumed.messages)
    assert prompt == "list" and answer is not None and answer.endswith("[interrupted by the user]")
    shown = "\n".join(t.plain for t in recap(resumed.messages, "Resumed", width=80, lines=40))
    assert "[interrupted by the user]" in shown

    server.add(Reply(content="3. third point"))
    result = resumed.run_sync("continue")
    assert result.status == "success"
    assert server.requests[-1].body["messages"][-2] == kept
    asyncio.run(resumed.aclose())


def test_nothing_is_kept_when_no_text_was_streamed(server: FakeServer, make_agent: MakeAgent) -> None:
    # interrupted while the model writes tool-call arguments: a half tool call is not a valid message
    server.add(
        Reply(tool_calls=[ToolCall("read_file", {"path": "x" * 400})], chunk_size=4, chunk_delay=0.01),
    )
    agent = make_agent()
    events = interrupt_after(agent, "read", lambda ev, evs: isinstance(ev, ToolArgumentsDelta) and len(evs) > 6)
    assert events[-1].status == "interrupted"
    assert [m["role"] for m in agent.messages] == ["system", "user"]

    # whitespace-only text is not an answer either
    server.add(Reply(content=" \n \n" * 100 + "late", chunk_size=2, chunk_delay=0.01))
    agent2 = make_agent()
    interrupt_after(agent2, "talk", lambda ev, evs: isinstance(ev, ContentDelta) and len(evs) > 5)
    assert [m["role"] for m in agent2.messages] == ["system", "user"]


def test_text_from_a_retried_attempt_is_not_kept(server: FakeServer, make_agent: MakeAgent) -> None:
    # the first attempt streams "stale" then dies; the retry streams "fresh…" and is interrupted
    server.add(
        Reply(content="stale stale stale", chunk_size=5, cut_after=2),
        Reply(content="fresh answer " * 60, chunk_size=5, chunk_delay=0.01),
    )
    agent = make_agent()
    retried: list[bool] = []

    def when(ev: Any, evs: list[Any]) -> bool:
        if isinstance(ev, Retrying):
            retried.append(True)
        return bool(retried) and isinstance(ev, ContentDelta) and ev.text.startswith("fresh")

    interrupt_after(agent, "talk", when)
    assert retried
    content = agent.messages[-1]["content"]
    assert content.startswith("fresh") and "stale" not in content and content.endswith(INTERRUPTED_MARK)


def test_cancelling_from_outside_is_not_a_user_interrupt(server: FakeServer, make_agent: MakeAgent) -> None:
    """A library caller cancelling its task gets CancelledError and no invented assistant message."""
    server.add(Reply(content="words " * 200, chunk_size=5, chunk_delay=0.01))
    agent = make_agent()

    async def go() -> None:
        async def consume() -> None:
            async for _ev in agent.stream("talk"):
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.3)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(go())
    assert all(not is_interrupted_answer(m) for m in agent.messages)


def test_the_marker_helpers_do_not_mistake_ordinary_messages() -> None:
    assert not is_interrupted_answer({"role": "user", "content": "x" + INTERRUPTED_MARK})
    assert not is_interrupted_answer({"role": "assistant", "content": None})
    assert not is_interrupted_answer({"role": "assistant", "content": "[interrupted by the user] is a phrase"})
    message = interrupted_answer("")
    assert is_interrupted_answer(message) and set(message) == {"role", "content"}


def test_an_error_reply_after_an_interrupted_answer_still_sends_it(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(Reply(content="partial " * 100, chunk_size=6, chunk_delay=0.01))
    agent = make_agent(max_retries=0)
    interrupt_after(agent, "go", lambda ev, evs: isinstance(ev, ContentDelta) and len(evs) > 6)
    kept = agent.messages[-1]
    server.add(ErrorReply(400, "bad"))
    result = agent.run_sync("continue")
    assert result.status == "error"
    assert server.requests[-1].body["messages"][2] == kept
