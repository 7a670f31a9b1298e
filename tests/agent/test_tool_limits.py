"""Tool timeouts (per tool and agent-wide), the cancellation flag of sync tools, and repeat_limit."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimicode import Agent, ToolContext, tool
from kimicode.events import ToolCallStarted
from kimicode.session.log import INTERRUPTED
from kimicode.testing import FakeServer, Reply, ToolCall

MakeAgent = Callable[..., Agent]


def tool_results(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_a_tool_timeout_is_reported_to_the_model_and_the_turn_goes_on(
    server: FakeServer, make_agent: MakeAgent
) -> None:
    flags: list[bool] = []

    @tool(timeout=0.2)
    def stuck(ctx: ToolContext) -> str:
        """Never finishes on its own."""
        ctx.cancelled.wait(10)
        flags.append(ctx.cancelled.is_set())
        return "late result"

    server.add(Reply(tool_calls=[ToolCall("stuck", {})]), Reply(content="gave up on it"))
    started = time.monotonic()
    result = make_agent(tools=[stuck], persist=False).run_sync("go")
    assert time.monotonic() - started < 5
    assert result.ok and result.result == "gave up on it"
    [content] = tool_results(result.messages)
    assert content.startswith("Error: the call timed out after 0.2 s") and "late result" not in content
    for _ in range(200):  # the thread saw its flag and stopped
        if flags:
            break
        time.sleep(0.01)
    assert flags == [True]


def test_the_agent_wide_timeout_applies_to_every_tool_and_a_tool_timeout_wins(
    server: FakeServer, make_agent: MakeAgent
) -> None:
    @tool
    async def slow_async() -> str:
        """Sleeps."""
        await asyncio.sleep(5)
        return "slept"

    @tool(timeout=2)
    async def patient() -> str:
        """Sleeps a little, within its own timeout."""
        await asyncio.sleep(0.4)
        return "patient done"

    server.add(
        Reply(tool_calls=[ToolCall("slow_async", {}), ToolCall("patient", {})]),
        Reply(content="done"),
    )
    result = make_agent(tools=[slow_async, patient], tool_timeout=0.2, persist=False).run_sync("go")
    assert tool_results(result.messages)[0].startswith("Error: the call timed out after 0.2 s")
    assert tool_results(result.messages)[1] == "patient done"


def test_a_tools_own_timeout_error_is_not_mistaken_for_ours(server: FakeServer, make_agent: MakeAgent) -> None:
    @tool
    def connects() -> str:
        """Raises the builtin TimeoutError, as a socket would."""
        raise TimeoutError("connect timed out")

    server.add(Reply(tool_calls=[ToolCall("connects", {})]), Reply(content="ok"))
    result = make_agent(tools=[connects], tool_timeout=30, persist=False).run_sync("go")
    assert tool_results(result.messages) == ["Error: connect timed out"]


@pytest.mark.parametrize("value", [0, -1.0])
def test_bad_timeouts_and_limits_are_refused(make_agent: MakeAgent, value: float) -> None:
    with pytest.raises(ValueError, match="tool_timeout"):
        make_agent(tool_timeout=value, persist=False)
    with pytest.raises(ValueError, match="repeat_limit"):
        make_agent(repeat_limit=int(value) + 1, persist=False)


def test_a_cancelled_sync_tool_sees_its_flag_and_its_result_is_discarded(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    done = threading.Event()
    finished_after_cancel: list[str] = []

    @tool
    def careful(ctx: ToolContext) -> str:
        """Works in steps, checking its flag; writes its output only when not cancelled."""
        for _ in range(500):
            if ctx.cancelled.is_set():
                finished_after_cancel.append("stopped")
                done.set()
                return "cancelled result"
            time.sleep(0.01)
        (workspace / "output.txt").write_text("work done")
        done.set()
        return "finished"

    server.add(Reply(tool_calls=[ToolCall("careful", {})]), Reply(content="next"))
    agent = make_agent(tools=[careful])

    async def main() -> Any:
        try:
            async for event in agent.stream("go"):
                if isinstance(event, ToolCallStarted):
                    await asyncio.sleep(0.05)
                    agent.interrupt()
            return agent.messages
        finally:
            await agent.aclose()

    messages = asyncio.run(asyncio.wait_for(main(), 20))
    assert done.wait(5)
    assert finished_after_cancel == ["stopped"] and not (workspace / "output.txt").exists()
    assert tool_results(messages) == [INTERRUPTED]  # "cancelled result" never reached the history


def test_concurrent_calls_have_their_own_flags(server: FakeServer, make_agent: MakeAgent) -> None:
    seen: list[threading.Event] = []

    @tool(kind="read")
    def look(n: int, ctx: ToolContext) -> str:
        """A read tool: calls run concurrently."""
        seen.append(ctx.cancelled)
        return str(n)

    server.add(Reply(tool_calls=[ToolCall("look", {"n": 1}), ToolCall("look", {"n": 2})]), Reply(content="x"))
    agent = make_agent(tools=[look], persist=False)
    assert agent.run_sync("go").ok
    assert len(seen) == 2 and seen[0] is not seen[1] and seen[0] is not agent.ctx.cancelled
    assert not any(flag.is_set() for flag in seen)


def repeat_script(server: FakeServer, name: str, times: int) -> None:
    server.add(*[Reply(tool_calls=[ToolCall(name, {"n": 1})]) for _ in range(times)])
    server.add(Reply(content="stopped polling"))


def test_repeat_limit_is_configurable_and_has_its_own_status(server: FakeServer, make_agent: MakeAgent) -> None:
    @tool
    def same(n: int) -> str:
        """Same answer every time."""
        return "same"

    repeat_script(server, "same", 3)
    result = make_agent(tools=[same], repeat_limit=3, persist=False).run_sync("loop")
    assert result.status == "repeat_limit" and "repeated 3 times" in (result.error or "")
    assert result.error is not None and result.error.kind == "repeat_limit"
    contents = tool_results(result.messages)
    assert "warning" in contents[1] and "at 3 repetitions" in contents[1]
    assert contents[2].startswith("Not run")


def test_repeat_limit_none_turns_it_off(server: FakeServer, make_agent: MakeAgent) -> None:
    @tool
    def same(n: int) -> str:
        """Same answer every time."""
        return "same"

    repeat_script(server, "same", 8)
    result = make_agent(tools=[same], repeat_limit=None, persist=False).run_sync("loop")
    assert result.ok and result.result == "stopped polling"
    assert tool_results(result.messages) == ["same"] * 8  # no warnings either


def test_a_repeatable_tool_opts_out(server: FakeServer, make_agent: MakeAgent) -> None:
    @tool(repeatable=True)
    def status(n: int) -> str:
        """Poll a job."""
        return "running"

    repeat_script(server, "status", 7)
    result = make_agent(tools=[status], persist=False).run_sync("wait for the job")
    assert result.ok and tool_results(result.messages) == ["running"] * 7
