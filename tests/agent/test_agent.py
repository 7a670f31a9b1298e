"""The turn loop against the fake server with real tools in temporary directories."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers import assert_valid_history

from kimicode import Agent, ToolContext, ToolError, tool
from kimicode.agent.core import Approval, ApprovalRequest
from kimicode.events import (
    ContentDelta,
    MessageCommitted,
    PermissionDenied,
    Retrying,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
)
from kimicode.session.log import load
from kimicode.testing import ErrorReply, FakeServer, Reply, ToolCall

MakeAgent = Callable[..., Agent]


def tool_results(messages: list[dict[str, Any]]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in messages if m.get("role") == "tool"}


def test_tool_loop_runs_real_tools_and_returns_the_answer(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    (workspace / "hello.txt").write_text("hello world\n")
    server.add(
        Reply(reasoning="read it", tool_calls=[ToolCall("read_file", {"path": "hello.txt"})]),
        Reply(reasoning="done", content="It says hello world."),
    )
    agent = make_agent()
    result = agent.run_sync("what does hello.txt say?")
    assert result.status == "success"
    assert result.result == "It says hello world."
    assert result.num_turns == 2
    roles = [m["role"] for m in result.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert "hello world" in result.messages[2]["content"]
    # the second request carried the first assistant message exactly as received
    assert server.requests[1].body["messages"][2] == result.messages[1]


def test_parallel_read_calls_run_concurrently_and_results_keep_call_order(
    server: FakeServer, make_agent: MakeAgent
) -> None:
    @tool(kind="read")
    async def slow_read(name: str) -> str:
        """Pretend to read slowly."""
        await asyncio.sleep(0.4)
        return f"content of {name}"

    server.add(
        Reply(tool_calls=[ToolCall("slow_read", {"name": n}) for n in ("a", "b", "c")]),
        Reply(content="ok"),
    )
    agent = make_agent(tools=[slow_read])
    start = time.monotonic()
    result = agent.run_sync("read three")
    elapsed = time.monotonic() - start
    assert result.status == "success"
    assert elapsed < 1.0, f"three 0.4 s reads took {elapsed:.2f} s: not concurrent"
    contents = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert contents == ["content of a", "content of b", "content of c"]


def test_changing_calls_run_one_at_a_time_in_order(server: FakeServer, make_agent: MakeAgent) -> None:
    order: list[str] = []

    @tool(kind="other")
    async def step(name: str) -> str:
        """Record a step."""
        order.append(f"start {name}")
        await asyncio.sleep(0.05)
        order.append(f"end {name}")
        return name

    server.add(Reply(tool_calls=[ToolCall("step", {"name": "1"}), ToolCall("step", {"name": "2"})]), Reply(content="k"))
    make_agent(tools=[step]).run_sync("go")
    assert order == ["start 1", "end 1", "start 2", "end 2"]


def test_bad_calls_become_error_results_and_the_loop_recovers(server: FakeServer, make_agent: MakeAgent) -> None:
    @tool
    def boom(x: int) -> str:
        """Always fails."""
        raise RuntimeError("kaput")

    @tool
    def refuse() -> str:
        """Reports a tool error."""
        raise ToolError("not today")

    server.add(
        Reply(
            tool_calls=[
                ToolCall("boom", '{"x": 1'),  # invalid JSON
                ToolCall("no_such_tool", {}),  # unknown tool
                ToolCall("boom", {"x": "one"}),  # schema violation
                ToolCall("boom", {"x": 1}),  # exception inside the tool
                ToolCall("refuse", ""),  # "" means {}
            ]
        ),
        Reply(content="recovered"),
    )
    result = make_agent(tools=[boom, refuse]).run_sync("try things")
    assert result.status == "success"
    results = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert "not valid JSON" in results[0]
    assert "Unknown tool 'no_such_tool'" in results[1] and "boom" in results[1]
    assert "must be of type integer" in results[2]
    assert "RuntimeError: kaput" in results[3]
    assert results[4] == "Error: not today"


def test_arguments_cut_off_by_length_are_explained(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(
        Reply(tool_calls=[ToolCall("write_file", '{"path": "a.txt", "content": "lots of')], finish_reason="length"),
        Reply(content="ok"),
    )
    result = make_agent(permission_mode="yolo").run_sync("write")
    tool_msg = next(m for m in result.messages if m["role"] == "tool")
    assert "cut off" in tool_msg["content"] and "max_completion_tokens" in tool_msg["content"]


def test_max_turns_stops_the_turn(server: FakeServer, make_agent: MakeAgent) -> None:
    @tool(kind="read")
    def ping(n: int) -> str:
        """Ping."""
        return "pong"

    server.add(*[Reply(tool_calls=[ToolCall("ping", {"n": i})]) for i in range(5)])
    result = make_agent(tools=[ping], max_turns=3).run_sync("loop")
    assert result.status == "max_turns"
    assert result.num_turns == 3
    assert "max_turns=3" in (result.error or "")  # a library agent: the option, not the flag
    assert_valid_history(result.messages)


def test_repeated_identical_calls_warn_at_three_and_stop_at_five(server: FakeServer, make_agent: MakeAgent) -> None:
    calls: list[int] = []

    @tool(kind="read")
    def same(n: int) -> str:
        """Same."""
        calls.append(n)
        return "same answer"

    server.add(*[Reply(tool_calls=[ToolCall("same", {"n": 1})]) for _ in range(6)])
    result = make_agent(tools=[same]).run_sync("loop")
    assert result.status == "repeat_limit"  # its own status: not the step limit
    assert "repeated 5 times" in (result.error or "")
    contents = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert "warning" not in contents[1]
    assert "warning" in contents[2] and "3 times" in contents[2]
    assert contents[4].startswith("Not run")
    assert len(calls) == 4  # the fifth was not run
    assert_valid_history(result.messages)


def test_headless_permissions_deny_and_tell_the_model(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    server.add(
        Reply(
            tool_calls=[
                ToolCall("write_file", {"path": "x.txt", "content": "hi"}),
                ToolCall("bash", {"command": "touch ran.txt"}),
            ]
        ),  # not `echo`: read-only since issue 10
        Reply(content="could not"),
    )
    result = make_agent(permission_mode="default").run_sync("write and run")
    assert not (workspace / "x.txt").exists() and not (workspace / "ran.txt").exists()
    results = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert all("Permission denied" in r for r in results)
    assert "--permission-mode accept-edits" in results[0]
    assert "--yolo" in results[1]
    assert [d["tool_name"] for d in result.permission_denials] == ["write_file", "bash"]


def test_accept_edits_allows_workspace_writes_but_not_bash_or_outside(
    server: FakeServer, make_agent: MakeAgent, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    server.add(
        Reply(
            tool_calls=[
                ToolCall("write_file", {"path": "in.txt", "content": "in"}),
                ToolCall("write_file", {"path": str(outside), "content": "out"}),
                ToolCall("write_file", {"path": "../escape.txt", "content": "out"}),
                ToolCall("bash", {"command": "touch ran"}),
            ]
        ),
        Reply(content="done"),
    )
    result = make_agent(permission_mode="accept-edits").run_sync("go")
    assert (workspace / "in.txt").read_text() == "in"
    assert not outside.exists() and not (tmp_path / "escape.txt").exists()
    assert not (workspace / "ran").exists()
    assert len(result.permission_denials) == 3


def test_approval_callback_decides_and_its_reason_reaches_the_model(
    server: FakeServer, make_agent: MakeAgent, workspace: Path
) -> None:
    seen: list[ApprovalRequest] = []

    async def approve(req: ApprovalRequest) -> Approval:
        seen.append(req)
        if req.tool == "bash":
            return Approval(False, "use the Makefile instead")
        return Approval(True)

    server.add(
        Reply(
            tool_calls=[
                ToolCall("write_file", {"path": "a.txt", "content": "A"}),
                ToolCall("bash", {"command": "rm -rf /"}),
            ]
        ),
        Reply(content="ok"),
    )
    result = make_agent(approve=approve).run_sync("go")
    assert (workspace / "a.txt").read_text() == "A"
    assert [r.tool for r in seen] == ["write_file", "bash"]
    assert seen[0].path == str(workspace / "a.txt")
    bash_result = tool_results(result.messages)["functions.bash:1"]
    assert "use the Makefile instead" in bash_result


def test_interrupt_during_stream_keeps_history_valid(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(Reply(content="a long answer " * 50, chunk_size=5, chunk_delay=0.02), Reply(content="next"))
    agent = make_agent()

    async def go() -> list[Any]:
        events: list[Any] = []
        async for ev in agent.stream("talk"):
            events.append(ev)
            if isinstance(ev, ContentDelta) and len(events) > 5:
                agent.interrupt()
        return events

    events = asyncio.run(go())
    finished = events[-1]
    assert isinstance(finished, TurnFinished) and finished.status == "interrupted"
    # the partial answer is kept, marked as interrupted (tests/agent/test_interrupted.py covers it in depth)
    assert [m["role"] for m in agent.messages] == ["system", "user", "assistant"]
    result = agent.run_sync("again")
    assert result.status == "success"
    assert [m["role"] for m in server.requests[1].body["messages"]] == ["system", "user", "assistant", "user"]


def test_interrupt_during_a_tool_adds_synthetic_results(server: FakeServer, make_agent: MakeAgent) -> None:
    started = asyncio.Event()

    @tool
    async def wait_forever() -> str:
        """Never returns."""
        started.set()
        await asyncio.sleep(60)
        return "no"

    server.add(Reply(tool_calls=[ToolCall("wait_forever", ""), ToolCall("wait_forever", "")]), Reply(content="ok"))
    agent = make_agent(tools=[wait_forever])

    async def go() -> TurnFinished:
        async def trigger() -> None:
            await started.wait()
            agent.interrupt()

        t = asyncio.create_task(trigger())
        last = None
        async for ev in agent.stream("wait"):
            last = ev
        await t
        assert isinstance(last, TurnFinished)
        return last

    finished = asyncio.run(go())
    assert finished.status == "interrupted"
    assert_valid_history(agent.messages)
    assert [m["content"] for m in agent.messages if m["role"] == "tool"] == ["interrupted by user"] * 2
    logged = load(agent.log.path).messages if agent.log else []
    assert logged == agent.messages


def test_cancelling_the_run_task_leaves_valid_history(server: FakeServer, make_agent: MakeAgent) -> None:
    @tool
    async def sleepy() -> str:
        """Sleeps."""
        await asyncio.sleep(60)
        return "no"

    server.add(Reply(tool_calls=[ToolCall("sleepy", "")]))
    started: list[Any] = []
    agent = make_agent(tools=[sleepy], on_event=lambda e: started.append(e) if isinstance(e, ToolCallStarted) else None)

    async def go() -> None:
        task = asyncio.create_task(agent.run("x"))
        deadline = time.monotonic() + 30  # the tool running, however long the first request took (a cold
        while not started and time.monotonic() < deadline:  # `import openai` is ~1 s under load: a fixed
            await asyncio.sleep(0.01)  # 0.5 s cancelled before the model answered)
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return
        raise AssertionError("the task was not cancelled")

    asyncio.run(go())
    assert_valid_history(agent.messages)
    assert agent.messages[-1]["content"] == "interrupted by user"


def test_transient_error_after_retries_reports_error_kind(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(*[ErrorReply(503, "down")] * 3)
    events: list[Any] = []
    result = make_agent(max_retries=2, on_event=events.append).run_sync("hi")
    assert result.status == "error" and result.error_kind == "transient"
    assert sum(isinstance(e, Retrying) for e in events) == 2


def test_large_tool_output_is_capped_and_spilled(server: FakeServer, make_agent: MakeAgent) -> None:
    big = "".join(f"line {i}\n" for i in range(200_000))

    @tool(kind="read")
    def flood() -> str:
        """Lots of output."""
        return big

    server.add(Reply(tool_calls=[ToolCall("flood", "")]), Reply(content="ok"))
    agent = make_agent(tools=[flood], tool_output_cap=10_000)
    result = agent.run_sync("flood")
    content = next(m["content"] for m in result.messages if m["role"] == "tool")
    assert len(content) < 11_000
    assert content.startswith("line 0\n") and content.rstrip().endswith("line 199999")
    spill = content.split("saved at ", 1)[1].split(":", 1)[0]
    assert Path(spill).read_text() == big


def test_session_log_records_messages_and_never_the_key(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(Reply(reasoning="r", tool_calls=[ToolCall("glob", {"pattern": "*"})]), Reply(content="done"))
    events: list[Any] = []
    agent = make_agent(on_event=events.append)
    agent.run_sync("list")
    assert agent.log is not None
    text = agent.log.path.read_text()
    assert "sk-test-secret-key" not in text
    records = [json.loads(line) for line in text.splitlines()]
    assert records[0]["type"] == "meta" and records[0]["v"] == 1
    committed = [e.message for e in events if isinstance(e, MessageCommitted)]
    logged = [r["message"] for r in records if r["type"] == "message"]
    assert logged[1:] == committed  # [0] is the system prompt, written at construction
    assert records[-1]["type"] == "turn_end"


def test_tool_events_carry_summaries(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    (workspace / "a.py").write_text("x = 1\n")
    server.add(Reply(tool_calls=[ToolCall("read_file", {"path": "a.py"})]), Reply(content="ok"))
    events: list[Any] = []
    make_agent(on_event=events.append).run_sync("read")
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert finished and finished[0].name == "read_file" and not finished[0].is_error
    assert not any(isinstance(e, PermissionDenied) for e in events)


def test_custom_tool_receives_context(server: FakeServer, make_agent: MakeAgent, workspace: Path) -> None:
    @tool
    def where(ctx: ToolContext) -> str:
        """Report the workspace."""
        return str(ctx.workspace)

    server.add(Reply(tool_calls=[ToolCall("where", "")]), Reply(content="ok"))
    result = make_agent(tools=[where]).run_sync("where")
    assert tool_results(result.messages)["functions.where:0"] == str(workspace)
