"""Events that cannot hang: hooks run after the event is queued and their failures are reported, not
raised; a stream left early cancels its turn and the agent runs again; compaction streams its events."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from helpers import assert_valid_history

from kimicode import Agent, ToolContext, UsageError, tool
from kimicode.events import (
    ContextUpdated,
    Event,
    MessageCommitted,
    Notice,
    ToolCallStarted,
    TurnFinished,
)
from kimicode.session.log import INTERRUPTED, load
from kimicode.testing import FakeServer, Reply, ToolCall

MakeAgent = Callable[..., Agent]
HANG = 20.0  # seconds after which a test calls it a hang (the fake server answers in milliseconds)


def hook_notices(events: list[Event]) -> list[Notice]:
    return [e for e in events if isinstance(e, Notice) and "on_event hook raised" in e.text]


@pytest.mark.parametrize("target", [TurnFinished, MessageCommitted, object])
def test_a_raising_hook_never_hangs_or_fails_the_turn(server: FakeServer, make_agent: MakeAgent, target: type) -> None:
    """`object` raises on every event; TurnFinished used to hang run(); the others flipped success to error."""
    server.add(Reply(tool_calls=[ToolCall("glob", {"pattern": "*"})]), Reply(content="done"))
    seen: list[Event] = []

    def hook(event: Event) -> None:
        seen.append(event)
        if isinstance(event, target):
            raise KeyError("broken hook")

    agent = make_agent(on_event=hook)

    async def main() -> tuple[Any, list[Event]]:
        events: list[Event] = []
        try:
            async with agent.stream("go") as stream:
                async for event in stream:
                    events.append(event)
            result = await agent.run("again")  # and the agent is still usable
            return result, events
        finally:
            await agent.aclose()

    server.add(Reply(content="second"))
    result, events = asyncio.run(asyncio.wait_for(main(), HANG))
    assert result.status == "success" and result.result == "second"
    assert isinstance(events[-1], TurnFinished) and events[-1].status == "success"
    if target is TurnFinished:  # the notice would come after the last event: only hook_errors has it
        assert hook_notices(events) == [] and len(result.hook_errors) == 1
        assert "KeyError" in result.hook_errors[0] and "TurnFinished" in result.hook_errors[0]
    else:
        assert len(hook_notices(events)) == 1  # one notice, not one per event
        assert hook_notices(events)[0].level == "warning"
        assert len(result.hook_errors) >= 1
    assert any(isinstance(e, TurnFinished) for e in seen)  # the hook still saw every event


def test_run_sync_with_a_hook_raising_on_turn_finished_returns(server: FakeServer, make_agent: MakeAgent) -> None:
    def hook(event: Event) -> None:
        if isinstance(event, TurnFinished):
            raise RuntimeError("boom")

    server.add(Reply(content="fine"))
    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(make_agent(on_event=hook).run_sync("hi")), daemon=True)
    thread.start()
    thread.join(HANG)
    assert done, "run_sync() hung on a hook that raised on TurnFinished"
    assert done[0].status == "success" and done[0].result == "fine"
    assert done[0].hook_errors == ["on_event hook raised RuntimeError: boom (on TurnFinished)"]


def test_hook_that_raises_base_exception_subclass_of_exception_only(server: FakeServer, make_agent: MakeAgent) -> None:
    """A hook raising SystemExit is a hook error like any other (issue 24: whatever a hook raises stays in its
    turn; before, SystemExit ended the program and every agent on its loop)."""

    def hook(event: Event) -> None:
        raise SystemExit(3)

    server.add(Reply(content="x"))
    result = make_agent(on_event=hook, persist=False).run_sync("hi")
    assert result.status == "success" and result.hook_errors and "SystemExit" in result.hook_errors[0]


@tool(kind="read")
def slow(seconds: float, ctx: ToolContext) -> str:
    """Sleep in small steps; stop when cancelled."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if ctx.cancelled.is_set():
            return "stopped early"
        time.sleep(0.01)
    return "slept"


def test_leaving_a_stream_by_break_cancels_the_turn(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(Reply(tool_calls=[ToolCall("slow", {"seconds": 30})]), Reply(content="after"))
    agent = make_agent(tools=[slow])

    async def main() -> Any:
        try:
            async for event in agent.stream("sleep"):
                if isinstance(event, ToolCallStarted):
                    break  # a consumer that stops iterating
            started = time.monotonic()
            result = await agent.run("next")  # used to raise "a turn is already running"
            return result, time.monotonic() - started
        finally:
            await agent.aclose()

    result, took = asyncio.run(asyncio.wait_for(main(), HANG))
    assert took < 10  # not waiting for the 30 s tool
    assert result.status == "success" and result.result == "after"
    assert_valid_history(agent.messages)
    tool_results = [m["content"] for m in agent.messages if m["role"] == "tool"]
    assert tool_results == [INTERRUPTED]  # the abandoned call got its synthetic result
    assert agent.log is not None
    statuses = [r["status"] for r in load(agent.log.path).records if r.get("type") == "turn_end"]
    assert statuses == ["interrupted", "success"]


def test_async_with_closes_the_turn_on_exit(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(Reply(tool_calls=[ToolCall("slow", {"seconds": 30})]), Reply(content="after"))
    agent = make_agent(tools=[slow])

    async def main() -> Any:
        try:
            with pytest.raises(ZeroDivisionError):
                async with agent.stream("sleep") as events:
                    async for event in events:
                        if isinstance(event, ToolCallStarted):
                            1 / 0  # noqa: B018 - the consumer fails mid-turn
            assert events.task is not None and events.task.done()  # cleaned up before the with ended
            assert_valid_history(agent.messages)
            return await agent.run("next")
        finally:
            await agent.aclose()

    result = asyncio.run(asyncio.wait_for(main(), HANG))
    assert result.ok


def test_cancelling_the_consumer_cancels_the_turn_and_propagates(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(Reply(tool_calls=[ToolCall("slow", {"seconds": 30})]), Reply(content="after"))
    agent = make_agent(tools=[slow])

    async def consume() -> None:
        async for _ in agent.stream("sleep"):
            pass

    async def main() -> Any:
        try:
            task = asyncio.create_task(consume())
            while not any(m["role"] == "assistant" for m in agent.messages):
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert_valid_history(agent.messages)  # written before the cancellation reached us
            return await agent.run("next")
        finally:
            await agent.aclose()

    assert asyncio.run(asyncio.wait_for(main(), HANG)).ok


def test_two_live_streams_on_one_agent_are_refused(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(Reply(tool_calls=[ToolCall("slow", {"seconds": 0.3})]), Reply(content="one"))
    agent = make_agent(tools=[slow])

    async def main() -> None:
        try:
            async with agent.stream("first") as first:
                await first.__anext__()
                with pytest.raises(UsageError, match="already running"):
                    await agent.run("second")
                with pytest.raises(RuntimeError):  # still a RuntimeError, as before
                    await agent.compact()
                async for _ in first:
                    pass
            assert first.closed
        finally:
            await agent.aclose()

    asyncio.run(asyncio.wait_for(main(), HANG))


def test_aclose_stops_an_abandoned_turn(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(Reply(tool_calls=[ToolCall("slow", {"seconds": 30})]))
    agent = make_agent(tools=[slow])

    async def main() -> None:
        stream = agent.stream("sleep")  # kept referenced, never closed
        async for event in stream:
            if isinstance(event, ToolCallStarted):
                break
        await agent.aclose()
        assert stream.task is not None and stream.task.done()

    asyncio.run(asyncio.wait_for(main(), HANG))
    assert_valid_history(agent.messages)


def long_history(n: int = 12) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "start"}]
    for i in range(n):
        call = {"id": f"call_{i}", "type": "function", "function": {"name": "glob", "arguments": "{}"}}
        history.append({"role": "assistant", "content": f"step {i}", "tool_calls": [call]})
        history.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"result {i} " * 200})
    history.append({"role": "assistant", "content": "all done"})
    return history


def test_compact_streams_its_events_and_still_awaits(server: FakeServer, make_agent: MakeAgent) -> None:
    hooked: list[Event] = []
    server.add(Reply(content="## Goal\nstart\n## Done\n- twelve steps"))
    server.add(Reply(content="## Goal\nstart\n## Done\n- twelve steps, again"))

    async def main() -> tuple[list[Event], Any, Any]:
        agent = make_agent(messages=long_history(), on_event=hooked.append)
        try:
            events = [e async for e in agent.compact("keep the step numbers")]  # streamed like a turn
            assert isinstance(events[-1], ContextUpdated) and events[-1].used == agent.context.used
            agent.messages[:] = long_history()
            result = await agent.compact()  # awaiting still returns the CompactionResult
            return events, result, agent
        finally:
            await agent.aclose()

    events, result, _agent = asyncio.run(asyncio.wait_for(main(), HANG))
    assert any(isinstance(e, Notice) for e in events)
    assert result is not None and result.summarized > 0
    assert [type(e) for e in hooked[: len(events)]] == [type(e) for e in events]  # on_event saw the same
    assert "keep the step numbers" in server.requests[0].body["messages"][-1]["content"]


def test_compact_with_a_raising_hook_completes(server: FakeServer, make_agent: MakeAgent) -> None:
    def hook(event: Event) -> None:
        raise ValueError("nope")

    server.add(Reply(content="## Goal\nstart"))

    async def main() -> Any:
        agent = make_agent(messages=long_history(), on_event=hook)
        try:
            stream = agent.compact()
            result = await stream
            return result, stream.hook_errors
        finally:
            await agent.aclose()

    result, errors = asyncio.run(asyncio.wait_for(main(), HANG))
    assert result is not None and errors and "ValueError" in errors[0]
