"""task: subagents with a fresh context and restricted tools, run concurrently, cancelled with the parent."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kimicode.events import Event, ToolCallFinished
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

SUBAGENT_MARK = "You are a subagent"


def is_child(req: RecordedRequest) -> bool:
    return SUBAGENT_MARK in req.body["messages"][0]["content"]


def tools_of(req: RecordedRequest) -> list[str]:
    return [t["function"]["name"] for t in req.body.get("tools", [])]


def router(parent_calls: list[ToolCall], child_delay: float = 0.0) -> Callable[[RecordedRequest], Reply]:
    """Parent: start the subagents, then answer. Child: one grep, then a report naming its job."""

    def answer(req: RecordedRequest) -> Reply:
        msgs = req.body["messages"]
        if is_child(req):
            job = msgs[1]["content"]
            if msgs[-1]["role"] == "user":
                return Reply(tool_calls=[ToolCall("grep", {"pattern": "needle"})], first_delay=child_delay,
                             usage={"prompt_tokens": 100, "completion_tokens": 10})  # fmt: skip
            usage = {"prompt_tokens": 120, "completion_tokens": 5}
            return Reply(content=f"report: {job} -> found in a.py", usage=usage)
        if msgs[-1]["role"] == "user":
            return Reply(tool_calls=parent_calls, usage={"prompt_tokens": 50, "completion_tokens": 20})
        return Reply(content="all done", usage={"prompt_tokens": 80, "completion_tokens": 3})

    return answer


def test_a_subagent_works_in_a_fresh_context_with_read_only_tools(
    make_agent: Callable[..., Any], server: FakeServer, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "a.py").write_text("needle = 1\n")
    server.add(*[router([ToolCall("task", {"description": "find needle", "prompt": "job A"})])] * 4)
    events: list[Event] = []
    agent = make_agent(on_event=events.append)
    assert "task" in agent.tools.names
    result = agent.run_sync("this parent conversation is private")
    assert result.ok and result.result == "all done"
    child_reqs = [r for r in server.requests if is_child(r)]
    assert len(child_reqs) == 2
    assert tools_of(child_reqs[0]) == ["read_file", "glob", "grep"]
    assert [m["role"] for m in child_reqs[0].body["messages"]] == ["system", "user"]
    assert "private" not in json.dumps(child_reqs[0].body)
    assert "a.py" in child_reqs[1].body["messages"][-1]["content"]  # the child's grep ran
    parent_final = [r for r in server.requests if not is_child(r)][-1]
    assert parent_final.body["messages"][-1]["content"] == "report: job A -> found in a.py"
    assert result.usage["prompt_tokens"] == 50 + 80 + 100 + 120  # the subagent's tokens count too
    assert result.usage["completion_tokens"] == 20 + 3 + 10 + 5
    finished = next(e for e in events if isinstance(e, ToolCallFinished) and e.name == "task")
    assert finished.display is not None and finished.display["subagent"]["steps"] == 2
    log = (tmp_path / "home" / "sessions").rglob(f"{agent.session_id}*.jsonl")
    records = [json.loads(line) for path in log for line in path.read_text().splitlines()]
    assert any(r.get("type") == "usage" and r.get("subagent") == "find needle" for r in records)


def test_several_subagents_run_concurrently(make_agent: Callable[..., Any], server: FakeServer) -> None:
    import threading

    calls = [ToolCall("task", {"description": f"job {c}", "prompt": f"job {c}"}) for c in "ABC"]
    base = router(calls)
    together = threading.Barrier(3, timeout=30)  # each child's first request waits for the other two
    met: list[bool] = []

    def answer(req: RecordedRequest) -> Reply:
        if is_child(req) and req.body["messages"][-1]["role"] == "user":
            try:
                together.wait()
                met.append(True)
            except threading.BrokenBarrierError:
                met.append(False)
        return base(req)

    server.add(*[answer] * 8)
    result = make_agent().run_sync("fan out")
    assert result.ok
    assert met == [True, True, True], "the three subagents' requests were not in flight at the same time"
    final = [r for r in server.requests if not is_child(r)][-1].body["messages"]
    reports = [m["content"] for m in final if m["role"] == "tool"]
    assert reports == [f"report: job {c} -> found in a.py" for c in "ABC"]  # results in call order


def test_subagents_are_cancelled_with_the_parent(make_agent: Callable[..., Any], server: FakeServer) -> None:
    server.add(*[router([ToolCall("task", {"description": "slow", "prompt": "slow job"})], child_delay=30)] * 3)
    agent = make_agent()

    async def scenario() -> tuple[str, float]:
        async def stop_soon() -> None:
            await asyncio.to_thread(server.wait_for_requests, 2, 10)
            await asyncio.sleep(0.1)
            agent.interrupt()

        stopper = asyncio.create_task(stop_soon())
        started = time.monotonic()
        result = await agent.run("go")
        await stopper
        await agent.aclose()
        return result.status, time.monotonic() - started

    status, elapsed = asyncio.run(scenario())
    assert status == "interrupted" and elapsed < 5
    assert agent.messages[-1]["role"] == "tool" and "interrupted" in agent.messages[-1]["content"].lower()


def test_tool_choice_and_permissions(make_agent: Callable[..., Any], server: FakeServer, workspace: Path) -> None:
    def answer(req: RecordedRequest) -> Reply:
        msgs = req.body["messages"]
        if is_child(req):
            if msgs[-1]["role"] == "user":
                return Reply(tool_calls=[ToolCall("bash", {"command": "echo hi > out.txt"})])
            return Reply(content="tried: " + msgs[-1]["content"][:60])
        if msgs[-1]["role"] == "user":
            return Reply(tool_calls=[
                ToolCall("task", {"description": "nested", "prompt": "x", "tools": ["task"]}),
                ToolCall("task", {"description": "run", "prompt": "run it", "tools": ["bash", "read_file"]}),
            ])  # fmt: skip
        return Reply(content="ok")

    server.add(*[answer] * 5)
    agent = make_agent(headless=True)
    agent.run_sync("go")
    child = next(r for r in server.requests if is_child(r))
    assert tools_of(child) == ["bash", "read_file"]
    final = server.requests[-1].body["messages"]
    results = [m["content"] for m in final if m["role"] == "tool"]
    assert "a subagent cannot use task" in results[0]
    assert "tried: Permission denied" in results[1]  # the parent's (headless) permissions apply
    assert not (workspace / "out.txt").exists()
