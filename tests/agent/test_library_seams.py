"""The library's seams as a service running many agents meets them (issue 35, "embedding the library"):
callbacks that raise what asyncio cannot carry, output types on every entry point, descriptors, shared
live data, the session store's thread, typing, cost and shared HTTP pools. Each test runs against the real
FakeServer and fails on the code before the fix."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import resource
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from helpers import lib_agent, valid_history
from pydantic import BaseModel

from kimicode import ApprovalRequest, tool
from kimicode.events import Event, MessageCommitted, ToolCallStarted, TurnFinished
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


# -- 2. output_type on every entry point -----------------------------------------------------------------------


class Release(BaseModel):
    version: str
    breaking: bool


class Movie(typing.TypedDict):  # typing's own, which pydantic refuses before Python 3.12
    title: str
    year: int


def test_run_sync_and_stream_take_output_type(server: FakeServer, tmp_path: Path) -> None:
    server.add(
        Reply(content='{"version": "1.2", "breaking": false}'),
        Reply(content="not json"),
        Reply(content='{"version": "2.0", "breaking": true}'),
        Reply(content='{"title": "Alien", "year": 1979}'),
    )
    agent = lib_agent(server, tmp_path)
    result = agent.run_sync("agent-0 the release?", output_type=Release)
    assert result.ok and result.output == Release(version="1.2", breaking=False)

    async def streamed() -> tuple[list[Any], Any]:
        events = [e async for e in agent.stream("agent-0 and the next?", output_type=Release)]
        value = await agent.stream("agent-0 a film?", output_type=Movie)
        await agent.aclose()
        return events, value

    events, movie = asyncio.run(streamed())
    finished = [e for e in events if isinstance(e, TurnFinished)]
    assert len(finished) == 2 and finished[0].output is None  # the invalid answer's turn, then the correction's
    assert events[-1] is finished[-1] and finished[-1].output == Release(version="2.0", breaking=True)
    assert movie == {"title": "Alien", "year": 1979}


def test_stream_with_output_type_ends_invalid_when_no_answer_matches(server: FakeServer, tmp_path: Path) -> None:
    server.add(*[Reply(content="no")] * 3)
    agent = lib_agent(server, tmp_path)

    async def main() -> list[Any]:
        try:
            return [e async for e in agent.stream("agent-0 go", output_type=Release)]
        finally:
            await agent.aclose()

    last = asyncio.run(main())[-1]
    assert isinstance(last, TurnFinished) and last.status == "invalid_output" and last.output is None


# -- 3. descriptors ---------------------------------------------------------------------------------------------


def files_open_under(root: Path) -> list[str]:
    """The files under `root` this process has open."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(root)):
                found.append(target)
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_idle_persisted_agents_hold_no_descriptors_and_reuse_one_pool(server: FakeServer, tmp_path: Path) -> None:
    """20 persisted agents after a turn each: no session file or lock kept open, the loop's one connection pool
    reused (each agent after the first finds a warm connection) and the server asked for its window once."""
    server.add(*[Reply(content="ok")] * 40)

    async def main() -> tuple[list[str], list[str]]:
        agents = [lib_agent(server, tmp_path / f"a{i}") for i in range(20)]
        for i, agent in enumerate(agents):  # one after another: a warm pool serves them all
            assert (await agent.run(f"agent-{i} hi")).ok
        for agent in agents:  # the background fsyncs close the logs
            assert agent.log is not None and agent.log.wait_durable(10)
        idle = files_open_under(tmp_path)
        for i, agent in enumerate(agents):  # the next turn opens them again
            assert (await agent.run(f"agent-{i} again")).ok
        for agent in agents:
            await agent.aclose()
            assert agent.log is not None and agent.log.wait_durable(10)
        return idle, files_open_under(tmp_path)

    idle, closed = asyncio.run(main())
    assert idle == [] and closed == []
    assert server.connections_opened <= 2
    assert server.other_requests.count("GET /v1/models") == 1


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_a_process_out_of_descriptors_is_told_so_not_that_the_server_is_unreachable(
    server: FakeServer, tmp_path: Path
) -> None:
    server.add(Reply(content="never sent"))
    agent = lib_agent(server, tmp_path, persist=False, max_retries=0)

    async def main() -> Any:
        await agent.ensure_client()
        cps = agent.checkpoints  # its warm-up stores the workspace on a thread: its files closing mid-test
        if cps is not None and cps.warming is not None:  # would free numbers below the limit for the socket
            cps.warming.join(30)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        filler: list[int] = []
        try:  # every number below the limit taken: the next socket() fails with EMFILE
            top = max(int(fd) for fd in os.listdir("/proc/self/fd"))
            while (fd := os.open(os.devnull, os.O_RDONLY)) < top:
                filler.append(fd)
            filler.append(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, (fd + 1, hard))
            return await agent.run("agent-0 hi")
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            for fd in filler:
                os.close(fd)
            await agent.aclose()

    result = asyncio.run(main())
    assert result.status == "error"
    assert "too many open files" in result.error and "cannot reach" not in result.error


# -- 4. events and results are read-only copies ------------------------------------------------------------------


def test_a_hook_redacting_arguments_does_not_change_what_the_tool_writes(server: FakeServer, tmp_path: Path) -> None:
    def redact(event: Event) -> None:
        if isinstance(event, ToolCallStarted) and "content" in event.arguments:
            event.arguments["content"] = "[redacted]"  # type: ignore[index]  # a dashboard's redaction

    server.add(
        Reply(tool_calls=[ToolCall("write_file", {"path": "x.txt", "content": "secret plan"})]),
        Reply(content="written"),
    )
    agent = lib_agent(server, tmp_path, permission_mode="accept-edits", on_event=redact)
    result = agent.run_sync("agent-0 write")
    assert result.ok and (agent.workspace / "x.txt").read_text() == "secret plan"
    assert result.hook_errors and "TypeError" in result.hook_errors[0]


def test_editing_results_and_committed_messages_never_changes_the_next_request(
    server: FakeServer, tmp_path: Path
) -> None:
    server.add(Reply(content="first answer"), Reply(content="second answer"))
    agent = lib_agent(server, tmp_path)
    seen: list[Any] = []

    async def main() -> None:
        result = await agent.run("agent-0 one")
        for tamper in (
            lambda m: m.__setitem__("content", "tampered"),
            lambda m: m.update(content="tampered"),
            lambda m: m.pop("content"),
        ):
            with pytest.raises(TypeError):
                tamper(result.messages[-1])
        result.messages.clear()  # the list is the caller's own
        async for event in agent.stream("agent-0 two"):
            if isinstance(event, MessageCommitted):
                seen.append(event.message)
                with pytest.raises(TypeError):
                    event.message["content"] = "tampered"  # type: ignore[index]
        mine = copy.deepcopy(seen[-1])  # a changeable copy, JSON as ever
        mine["content"] = "mine"
        assert json.loads(json.dumps(seen[-1]))["content"] == "second answer"
        await agent.aclose()

    asyncio.run(main())
    sent = server.requests[-1].body["messages"]
    assert "tampered" not in json.dumps(sent) and sent[-2]["content"] == "first answer"
    assert agent.messages[-1]["content"] == "second answer"


def try_lock_elsewhere(directory: Path, session_id: str) -> str:
    """What another process gets when it tries to take the session's lock."""
    code = (
        "import sys\nfrom pathlib import Path\nfrom kimicode.session.lock import SessionLock\n"
        "try:\n    SessionLock.acquire(Path(sys.argv[1]), sys.argv[2]).release()\n    print('taken')\n"
        "except Exception as exc:\n    print(type(exc).__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(directory), session_id], capture_output=True, text=True, timeout=60
    )
    return done.stdout.strip() or done.stderr


def test_an_idle_agent_keeps_its_session_from_other_processes_without_a_descriptor(
    server: FakeServer, tmp_path: Path
) -> None:
    server.add(Reply(content="one"), Reply(content="two"))
    agent = lib_agent(server, tmp_path)
    sessions = tmp_path / "home" / "sessions"

    async def main() -> None:
        assert (await agent.run("agent-0 one")).ok
        assert agent.log is not None and agent.log.wait_durable(10)
        if agent.checkpoints is not None and agent.checkpoints.warming is not None:
            agent.checkpoints.warming.join(30)  # the store's warm-up at open holds its lock while it runs
        assert files_open_under(tmp_path) == []
        assert try_lock_elsewhere(sessions, agent.session_id) == "SessionBusyError"  # idle, still its own
        assert (await agent.run("agent-0 two")).ok
        await agent.aclose()

    asyncio.run(main())
    assert try_lock_elsewhere(sessions, agent.session_id) == "taken"


def test_a_log_written_by_another_process_between_turns_is_not_written_into(server: FakeServer, tmp_path: Path) -> None:
    """A writer that got past the lock (a sandboxed process of another pid namespace): the next turn stops."""
    server.add(Reply(content="one"), Reply(content="two"))
    agent = lib_agent(server, tmp_path)
    assert agent.run_sync("agent-0 one").ok
    log = tmp_path / "home" / "sessions" / f"{agent.session_id}.jsonl"
    with log.open("a") as fh:
        fh.write(json.dumps({"v": 1, "type": "turn_end", "status": "success", "steps": 1}) + "\n")
    written = log.read_text()
    second = agent.run_sync("agent-0 two")
    assert (second.status, second.error_kind) == ("error", "session_log")
    assert "continued by another process" in second.error and log.read_text() == written


def test_a_structured_stream_left_early_is_interrupted_and_says_so(server: FakeServer, tmp_path: Path) -> None:
    """Cancelling `run(..., output_type=...)` mid-turn: the history stays valid and the agent runs again."""

    @tool
    async def slow() -> str:
        """Take a while."""
        await asyncio.sleep(30)
        return "late"

    server.add(Reply(tool_calls=[ToolCall("slow", {})]), Reply(content='{"version": "3", "breaking": false}'))
    agent = lib_agent(server, tmp_path, tools=[slow])
    seen: list[Any] = []

    async def main() -> Any:
        task = asyncio.create_task(agent.run("agent-0 go", output_type=Release))
        while not any(isinstance(e, ToolCallStarted) for e in seen):
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        try:
            return await agent.run("agent-0 again", output_type=Release)
        finally:
            await agent.aclose()

    agent.on_event = seen.append
    result = asyncio.run(main())
    statuses = [e.status for e in seen if isinstance(e, TurnFinished)]
    assert statuses == ["interrupted", "success"] and result.output == Release(version="3", breaking=False)
    assert valid_history(agent.messages)
