"""The library's seams as a service running many agents meets them (issue 35, "embedding the library"):
callbacks that raise what asyncio cannot carry, output types on every entry point, descriptors, shared
live data, the session store's thread, typing, cost and shared HTTP pools. Each test runs against the real
FakeServer and fails on the code before the fix."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from helpers import lib_agent, valid_history

from kimicode import ApprovalRequest, tool
from kimicode.testing import FakeServer, Reply, ToolCall

# -- 1. whatever a sync callback raises comes back as a value -------------------------------------------------


def run_bounded(coro: Any, seconds: float = 10) -> Any:
    """Run `coro`, failing (not hanging) when it does not return in time."""

    async def main() -> Any:
        return await asyncio.wait_for(coro, seconds)

    return asyncio.run(main())


@pytest.mark.parametrize("exc", [StopIteration(), StopAsyncIteration(), asyncio.CancelledError()])
def test_sync_tool_raising_what_a_future_cannot_carry_is_an_error_result(
    server: FakeServer, tmp_path: Path, exc: BaseException
) -> None:
    """`next()` on an empty iterator inside a sync tool: the model gets the error, run() returns."""

    @tool
    def pick() -> str:
        """Pick the first item."""
        raise exc

    server.add(Reply(tool_calls=[ToolCall("pick", {})]), Reply(content="recovered"))
    agent = lib_agent(server, tmp_path, tools=[pick])
    result = run_bounded(agent.run("agent-0 go"))
    assert result.status == "success" and result.result == "recovered"
    content = next(m for m in result.messages if m["role"] == "tool")["content"]
    assert type(exc).__name__ in content
    run_bounded(agent.aclose())


def test_async_tool_raising_cancelled_error_nobody_asked_for_is_an_error_result(
    server: FakeServer, tmp_path: Path
) -> None:
    """A tool that raises CancelledError itself (a library's own timeout) did not cancel the turn."""

    @tool
    async def flaky() -> str:
        """Fail the way some client libraries do."""
        raise asyncio.CancelledError("inner timeout")

    server.add(Reply(tool_calls=[ToolCall("flaky", {})]), Reply(content="recovered"))
    agent = lib_agent(server, tmp_path, tools=[flaky])
    result = run_bounded(agent.run("agent-0 go"))
    assert result.status == "success" and result.result == "recovered"
    assert "CancelledError" in next(m for m in result.messages if m["role"] == "tool")["content"]
    run_bounded(agent.aclose())


@pytest.mark.parametrize("exc", [StopIteration(), GeneratorExit(), asyncio.CancelledError(), KeyboardInterrupt()])
def test_sync_approve_raising_anything_refuses_and_leaves_a_valid_history(
    server: FakeServer, tmp_path: Path, exc: BaseException
) -> None:
    def approve(request: ApprovalRequest) -> bool:
        raise exc

    server.add(Reply(tool_calls=[ToolCall("write_file", {"path": "x.txt", "content": "x"})]), Reply(content="ok"))
    agent = lib_agent(server, tmp_path, approve=approve)
    result = run_bounded(agent.run("agent-0 write"))
    assert result.status == "success" and result.result == "ok"
    assert not (agent.workspace / "x.txt").exists()
    assert type(exc).__name__ in result.permission_denials[0]["reason"]
    assert valid_history(agent.messages)
    run_bounded(agent.aclose())
