"""The library used the way a long-running service or an evaluation harness uses it, trying to break it:
many agents on one loop, abandoned and interrupted streams, hooks that raise or call back into the
agent, tools that misbehave, and callbacks that return nonsense. Every test runs against the real
FakeServer; each asserts what a demanding embedder would expect."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import lib_agent, valid_history

import kimicode
from kimicode import Agent, Approval, ApprovalRequest, ToolContext, tool
from kimicode.events import Event, ToolCallStarted, TurnFinished
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall


def tag_of(request: RecordedRequest) -> str:
    """The `agent-N` tag of the conversation a request belongs to (its first user message)."""
    first = next(m for m in request.body["messages"] if m["role"] == "user")
    content = first["content"]
    text = content if isinstance(content, str) else json.dumps(content)
    return text.split()[0]


def router(request: RecordedRequest) -> Reply:
    """One conversation per agent, whatever order their requests arrive in: a new prompt gets a `nap`
    call, a tool result gets the answer."""
    last = request.body["messages"][-1]
    tag = tag_of(request)
    if last["role"] == "user":
        return Reply(content=None, tool_calls=[ToolCall("nap", {"seconds": 0.2})], chunk_delay=0.002)
    return Reply(content=f"done {tag}", chunk_size=3, chunk_delay=0.002)


@tool(kind="read")
async def nap(seconds: float) -> str:
    """Sleep a while (an async tool that is cancelled where it awaits)."""
    await asyncio.sleep(seconds)
    return "rested"


# -- many agents on one loop ------------------------------------------------------------------------------


def test_twenty_agents_interleaved_some_abandoned_interrupted_or_with_broken_hooks(tmp_path: Path) -> None:
    """20 agents, one loop: 5 plain, 5 streams left at the first tool call, 5 interrupted mid-tool, 5 with
    hooks that raise. Every agent then runs a second turn; no turn leaks, every history is valid."""

    def broken(event: Event) -> None:
        raise RuntimeError("dashboard down")

    async def main(server: FakeServer) -> None:
        agents = [
            lib_agent(server, tmp_path / f"a{i}", tools=[nap], on_event=broken if i >= 15 else None) for i in range(20)
        ]
        first: dict[int, str] = {}

        async def plain(i: int) -> None:
            first[i] = (await agents[i].run(f"agent-{i} go")).status

        async def abandon(i: int) -> None:
            async for event in agents[i].stream(f"agent-{i} go"):
                if isinstance(event, ToolCallStarted):
                    break
            first[i] = "abandoned"

        async def interrupt(i: int) -> None:
            agent = agents[i]

            async def watch() -> str:
                async with agent.stream(f"agent-{i} go") as events:
                    async for event in events:
                        if isinstance(event, ToolCallStarted):
                            agent.interrupt()
                        if isinstance(event, TurnFinished):
                            return event.status
                return "no TurnFinished"

            first[i] = await watch()

        jobs = [plain(i) for i in range(5)] + [abandon(i) for i in range(5, 10)]
        jobs += [interrupt(i) for i in range(10, 15)] + [plain(i) for i in range(15, 20)]
        await asyncio.wait_for(asyncio.gather(*jobs), 30)
        assert [first[i] for i in range(5)] == ["success"] * 5
        assert [first[i] for i in range(10, 15)] == ["interrupted"] * 5
        assert [first[i] for i in range(15, 20)] == ["success"] * 5
        second = await asyncio.wait_for(asyncio.gather(*(a.run("again") for a in agents)), 30)
        for i, (agent, result) in enumerate(zip(agents, second, strict=True)):
            assert result.status == "success", (i, result.error)
            assert result.result == f"done agent-{i}"
            assert valid_history(agent.messages), (i, agent.messages)
            assert bool(result.hook_errors) == (i >= 15)
            assert not agent.busy
        await asyncio.gather(*(a.aclose() for a in agents))

    with FakeServer([router] * 200) as server:
        asyncio.run(main(server))


# -- hooks that call back into the agent ----------------------------------------------------------------


def test_hook_that_interrupts_ends_the_turn_as_interrupted(server: FakeServer, tmp_path: Path) -> None:
    server.add(router, router)
    holder: list[Agent] = []

    def hook(event: Event) -> None:
        if isinstance(event, ToolCallStarted):
            holder[0].interrupt()

    agent = lib_agent(server, tmp_path, tools=[nap], on_event=hook)
    holder.append(agent)
    result = agent.run_sync("agent-0 go")
    assert result.status == "interrupted"
    assert not result.hook_errors
    assert valid_history(agent.messages)


def test_hook_that_starts_a_second_run_gets_a_clear_usage_error(server: FakeServer, tmp_path: Path) -> None:
    server.add(router, router)
    spawned: list[asyncio.Task[Any]] = []

    async def main() -> None:
        agent = lib_agent(server, tmp_path, tools=[nap])

        def hook(event: Event) -> None:
            if isinstance(event, ToolCallStarted):
                spawned.append(asyncio.ensure_future(agent.run("agent-0 nested")))

        agent.on_event = hook
        result = await agent.run("agent-0 go")
        assert result.status == "success"
        with pytest.raises(kimicode.UsageError, match="already running"):
            await spawned[0]
        await agent.aclose()

    asyncio.run(main())


def test_hook_that_calls_run_sync_is_a_reported_hook_error(server: FakeServer, tmp_path: Path) -> None:
    server.add(Reply(content="hi"))
    holder: list[Agent] = []

    def hook(event: Event) -> None:
        if isinstance(event, ToolCallStarted | TurnFinished):
            holder[0].run_sync("again")

    agent = lib_agent(server, tmp_path, on_event=hook)
    holder.append(agent)
    result = agent.run_sync("agent-0 hello")
    assert result.status == "success" and result.result == "hi"
    assert len(result.hook_errors) == 1 and "UsageError" in result.hook_errors[0]
    assert "await agent.run" in result.hook_errors[0]


# -- tools that misbehave ---------------------------------------------------------------------------------


def test_sync_tool_that_ignores_cancellation_does_not_hold_the_turn(server: FakeServer, tmp_path: Path) -> None:
    """The turn ends at once on interrupt; the thread finishes later with its flag set, and what it
    returns is dropped; the agent runs the next turn meanwhile."""
    release = threading.Event()
    flag_seen: list[bool] = []

    @tool
    def stubborn(ctx: ToolContext) -> str:
        """Ignore cancellation for a while."""
        release.wait(10)
        flag_seen.append(ctx.cancelled.is_set())
        return "LATE RESULT"

    server.add(Reply(tool_calls=[ToolCall("stubborn", {})]), Reply(content="next"))

    async def main() -> None:
        agent = lib_agent(server, tmp_path, tools=[stubborn])

        def hook(event: Event) -> None:
            if isinstance(event, ToolCallStarted):
                asyncio.get_running_loop().call_later(0.05, agent.interrupt)

        agent.on_event = hook
        result = await asyncio.wait_for(agent.run("agent-0 go"), 5)
        assert result.status == "interrupted"
        assert not release.is_set()  # the thread is still blocked: the turn did not wait for it
        agent.on_event = None
        second = await agent.run("agent-0 next")
        assert second.result == "next"
        release.set()
        await asyncio.sleep(0.2)
        assert flag_seen == [True]
        assert "LATE RESULT" not in json.dumps(agent.messages)
        assert valid_history(agent.messages)
        await agent.aclose()

    try:
        asyncio.run(main())
    finally:
        release.set()


class Abort(BaseException):
    """A BaseException a library raises to unwind (like gevent's or trio's)."""


@pytest.mark.parametrize("exc", [SystemExit(2), KeyboardInterrupt(), Abort("unwind"), GeneratorExit()])
@pytest.mark.parametrize("sync", [True, False])
def test_tool_raising_a_base_exception_is_an_error_result_not_a_dead_service(
    server: FakeServer, tmp_path: Path, exc: BaseException, sync: bool
) -> None:
    """A tool is not the program: `sys.exit()` inside a wrapped CLI (argparse!) or a stray
    KeyboardInterrupt from a tool must not take down 19 other agents on the loop."""
    if sync:

        @tool
        def explode() -> str:
            """Raise."""
            raise exc

    else:

        @tool
        async def explode() -> str:
            """Raise."""
            raise exc

    server.add(Reply(tool_calls=[ToolCall("explode", {})]), Reply(content="recovered"))

    async def main() -> None:
        agent = lib_agent(server, tmp_path, tools=[explode])
        bystander = asyncio.create_task(asyncio.sleep(0.5, "alive"))
        result = await agent.run("agent-0 go")
        assert result.status == "success" and result.result == "recovered"
        tool_msg = next(m for m in result.messages if m["role"] == "tool")
        assert type(exc).__name__ in tool_msg["content"]
        assert await bystander == "alive"
        await agent.aclose()

    asyncio.run(main())


class Weird:
    def __str__(self) -> str:
        return "weird-object"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(b"raw", "raw"), (None, "(no output)"), ({"a": {1, 2}}, '"a"'), (Weird(), "weird-object"), (42, "42")],
)
def test_tool_returning_non_strings(server: FakeServer, tmp_path: Path, value: Any, expected: str) -> None:
    @tool
    def give() -> Any:
        """Return something that is not a string."""
        return value

    server.add(Reply(tool_calls=[ToolCall("give", {})]), Reply(content="ok"))
    result = lib_agent(server, tmp_path, tools=[give]).run_sync("agent-0 go")
    assert result.status == "success"
    content = next(m for m in result.messages if m["role"] == "tool")["content"]
    assert isinstance(content, str) and expected in content


# -- approvals that misbehave ---------------------------------------------------------------------------


def test_approve_callback_that_raises_refuses_the_call_and_the_turn_goes_on(server: FakeServer, tmp_path: Path) -> None:
    def approve(request: ApprovalRequest) -> bool:
        raise RuntimeError("approval service unreachable")

    server.add(Reply(tool_calls=[ToolCall("write_file", {"path": "x.txt", "content": "x"})]), Reply(content="ok"))
    agent = lib_agent(server, tmp_path, approve=approve)
    result = agent.run_sync("agent-0 write")
    assert result.status == "success" and result.result == "ok"
    assert not (agent.workspace / "x.txt").exists()
    assert [d["tool_name"] for d in result.permission_denials] == ["write_file"]
    assert "approval service unreachable" in result.permission_denials[0]["reason"]


@pytest.mark.parametrize("answer", ["no", "deny", 1, [False], object(), Approval(False)])
def test_approve_callback_returning_garbage_never_approves(server: FakeServer, tmp_path: Path, answer: Any) -> None:
    """Only `True` or `Approval(True)` approve: a string "no" (truthy!) must not write the file."""
    server.add(Reply(tool_calls=[ToolCall("write_file", {"path": "x.txt", "content": "x"})]), Reply(content="ok"))
    agent = lib_agent(server, tmp_path, approve=lambda request: answer)
    result = agent.run_sync("agent-0 write")
    assert result.status == "success"
    assert not (agent.workspace / "x.txt").exists()
    assert [d["tool_name"] for d in result.permission_denials] == ["write_file"]


def test_approve_true_still_approves(server: FakeServer, tmp_path: Path) -> None:
    server.add(Reply(tool_calls=[ToolCall("write_file", {"path": "x.txt", "content": "x"})]), Reply(content="ok"))
    agent = lib_agent(server, tmp_path, approve=lambda request: True)
    assert agent.run_sync("agent-0 write").status == "success"
    assert (agent.workspace / "x.txt").read_text() == "x"


# -- lifecycle -----------------------------------------------------------------------------------------------


def test_agent_after_aclose_runs_again_and_aclose_twice_is_harmless(server: FakeServer, tmp_path: Path) -> None:
    server.add(Reply(content="one"), Reply(content="two"))

    async def main() -> None:
        agent = lib_agent(server, tmp_path)
        await agent.aclose()  # before any turn
        assert (await agent.run("agent-0 a")).result == "one"
        await agent.aclose()
        await agent.aclose()
        assert (await agent.run("agent-0 b")).result == "two"
        await agent.aclose()

    asyncio.run(main())


def test_second_run_while_one_runs_is_a_usage_error_and_the_first_is_unharmed(
    server: FakeServer, tmp_path: Path
) -> None:
    server.add(Reply(content="slow answer", first_delay=0.3))

    async def main() -> None:
        agent = lib_agent(server, tmp_path)
        first = asyncio.create_task(agent.run("agent-0 a"))
        await asyncio.sleep(0.1)
        with pytest.raises(kimicode.UsageError, match="already running"):
            await agent.run("agent-0 b")
        with pytest.raises(kimicode.UsageError):
            agent.fork()
        assert (await first).result == "slow answer"
        await agent.aclose()

    asyncio.run(main())


def test_run_sync_from_a_thread_while_the_loop_runs_another_agent(server: FakeServer, tmp_path: Path) -> None:
    server.add(Reply(content="loop answer", first_delay=0.3), Reply(content="thread answer"))

    async def main() -> None:
        on_loop = lib_agent(server, tmp_path / "a")
        in_thread = lib_agent(server, tmp_path / "b")
        task = asyncio.create_task(on_loop.run("agent-0 a"))
        await asyncio.sleep(0.05)
        result = await asyncio.to_thread(in_thread.run_sync, "agent-1 b")
        assert result.result == "thread answer"
        assert (await task).result == "loop answer"
        await on_loop.aclose()

    asyncio.run(main())


def test_run_sync_from_a_thread_on_an_agent_busy_on_the_loop_is_a_usage_error(
    server: FakeServer, tmp_path: Path
) -> None:
    server.add(Reply(content="loop answer", first_delay=0.5))

    async def main() -> None:
        agent = lib_agent(server, tmp_path)
        task = asyncio.create_task(agent.run("agent-0 a"))
        await asyncio.sleep(0.1)
        with pytest.raises(kimicode.UsageError):
            await asyncio.to_thread(agent.run_sync, "agent-0 b")
        assert (await task).result == "loop answer"
        await agent.aclose()

    asyncio.run(main())


def test_resume_of_unknown_session_is_a_session_error(server: FakeServer, tmp_path: Path) -> None:
    with pytest.raises(kimicode.SessionError, match="nope-does-not-exist"):
        Agent.resume("nope-does-not-exist", base_url=server.base_url, api_key="k", home=tmp_path / "home")
    with pytest.raises(kimicode.KimicodeError):
        Agent.resume("", base_url=server.base_url, api_key="k", home=tmp_path / "home")


@pytest.mark.prepush
def test_a_thousand_idle_agents_hold_no_descriptors(server: FakeServer, tmp_path: Path) -> None:
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = fds()
    agents = [lib_agent(server, tmp_path) for _ in range(1000)]
    assert fds() - before <= 2  # nothing per agent
    assert not (tmp_path / "home" / "sessions").exists() or not any((tmp_path / "home" / "sessions").iterdir())
    assert len({a.session_id for a in agents}) == 1000


# -- invalid history given as messages= ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "system", "content": "s"}, {"role": "tool", "tool_call_id": "c1", "content": "orphan"}],
        [{"role": "system", "content": "s"}, {"role": "user"}],
        [{"role": "wizard", "content": "s"}],
        [
            {"role": "system", "content": "s"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
            },
        ],
        ["not a dict"],
    ],
)
def test_invalid_history_is_refused_before_any_request(server: FakeServer, tmp_path: Path, messages: list[Any]) -> None:
    with pytest.raises((kimicode.KimicodeError, ValueError, TypeError)) as info:
        agent = lib_agent(server, tmp_path, messages=messages)
        agent.run_sync("agent-0 go")
    assert "messages" in str(info.value)
    assert isinstance(info.value, kimicode.UsageError)
    assert server.requests == []


# -- more lifecycle edges -------------------------------------------------------------------------------------


def test_interrupt_before_a_turn_does_not_poison_the_next_one(server: FakeServer, tmp_path: Path) -> None:
    server.add(Reply(content="fine"))
    agent = lib_agent(server, tmp_path)
    agent.interrupt()
    assert agent.run_sync("agent-0 go").status == "success"


def test_aclose_while_another_task_runs_a_turn_ends_it_as_interrupted(server: FakeServer, tmp_path: Path) -> None:
    """A service shutting down closes its agents while their runs are in flight: each run returns an
    interrupted result (its caller was not cancelled, so it must not see a CancelledError)."""
    server.add(Reply(content="slow", first_delay=2))

    async def main() -> None:
        agent = lib_agent(server, tmp_path)
        task = asyncio.create_task(agent.run("agent-0 go"))
        await asyncio.sleep(0.2)
        await agent.aclose()
        result = await asyncio.wait_for(task, 5)
        assert result.status == "interrupted"
        assert valid_history(agent.messages)

    asyncio.run(main())


def test_cancel_while_an_async_approve_callback_waits(server: FakeServer, tmp_path: Path) -> None:
    async def approve(request: ApprovalRequest) -> bool:
        await asyncio.sleep(3600)  # the human never answers
        return True

    server.add(Reply(tool_calls=[ToolCall("write_file", {"path": "x.txt", "content": "x"})]), Reply(content="ok"))

    async def main() -> None:
        agent = lib_agent(server, tmp_path, approve=approve)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(agent.run("agent-0 write"), 0.5)
        assert not (agent.workspace / "x.txt").exists()
        assert valid_history(agent.messages)
        assert agent.messages[-1]["role"] == "tool"
        await agent.aclose()

    asyncio.run(main())


def test_timeout_of_a_sync_tool_that_ignores_it_lets_the_turn_go_on(server: FakeServer, tmp_path: Path) -> None:
    release = threading.Event()

    @tool(timeout=0.2)
    def stuck() -> str:
        """Block."""
        release.wait(10)
        return "LATE"

    server.add(Reply(tool_calls=[ToolCall("stuck", {})]), Reply(content="moved on"))
    try:
        result = lib_agent(server, tmp_path, tools=[stuck]).run_sync("agent-0 go")
    finally:
        release.set()
    assert result.status == "success" and result.result == "moved on"
    assert "timed out after 0.2 s" in next(m for m in result.messages if m["role"] == "tool")["content"]


@pytest.mark.parametrize("prompt", [None, b"bytes", 42, ["list"]])
def test_a_prompt_that_is_not_text_is_refused_before_any_request(
    server: FakeServer, tmp_path: Path, prompt: Any
) -> None:
    agent = lib_agent(server, tmp_path)
    with pytest.raises(TypeError, match="prompt"):
        agent.run_sync(prompt)
    assert server.requests == []
    assert not (tmp_path / "home" / "sessions").exists() or not any((tmp_path / "home" / "sessions").iterdir())


def test_compact_while_a_turn_runs_is_a_usage_error(server: FakeServer, tmp_path: Path) -> None:
    server.add(Reply(content="slow", first_delay=0.5))

    async def main() -> None:
        agent = lib_agent(server, tmp_path)
        task = asyncio.create_task(agent.run("agent-0 go"))
        await asyncio.sleep(0.1)
        with pytest.raises(kimicode.UsageError):
            await agent.compact()
        assert (await task).result == "slow"
        await agent.aclose()

    asyncio.run(main())


def test_a_hook_cannot_rewrite_the_history_through_the_events(server: FakeServer, tmp_path: Path) -> None:
    from kimicode.events import MessageCommitted

    def vandal(event: Event) -> None:
        if isinstance(event, MessageCommitted):
            event.message["content"] = "VANDALISED"  # type: ignore[index]

    server.add(Reply(content="first"), Reply(content="second"))
    agent = lib_agent(server, tmp_path, on_event=vandal)
    agent.run_sync("agent-0 one")
    agent.run_sync("agent-0 two")
    sent = server.requests[1].body["messages"]
    assert [m["content"] for m in sent[1:]] == ["agent-0 one", "first", "agent-0 two"]


@pytest.mark.prepush
def test_abandoned_compaction_leaves_the_agent_usable(server: FakeServer, tmp_path: Path) -> None:
    server.add(Reply(content="answer one"), Reply(content="summary", first_delay=1), Reply(content="answer two"))

    async def main() -> None:
        agent = lib_agent(server, tmp_path)
        await agent.run("agent-0 one")
        before = list(agent.messages)
        async with agent.compact() as events:
            async for _ in events:
                break
        result = await agent.run("agent-0 two")
        assert result.status == "success"
        assert agent.messages[: len(before)] == before
        await agent.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("session_id", ["../../etc/passwd", "/etc/passwd", "a/b", "*", "2*", "[0-9]", "?", "\x00"])
def test_resume_with_a_hostile_session_id_is_a_session_error(
    server: FakeServer, tmp_path: Path, session_id: str
) -> None:
    sessions = tmp_path / "home" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "20260101-000000-abcdef.jsonl").write_text("")  # one session: `*` must not pick it
    with pytest.raises(kimicode.SessionError):
        Agent.resume(session_id, base_url=server.base_url, api_key="k", home=tmp_path / "home")
