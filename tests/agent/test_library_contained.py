"""A library that cannot be starved or held: user code (sync tools, approve callbacks, hooks) runs where it
cannot block kimicode's own work, and whatever it does after kimicode stopped waiting for it is contained.

Each test here failed before the fix it names (issue 24, "what a library user hit")."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, assert_valid_history, lib_agent

from kimicode import ApprovalRequest, tool
from kimicode.events import ContentDelta, Event, ToolCallStarted
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

# -- sync tools in kimicode's own executor ----------------------------------------------------------------


def test_timed_out_sync_tools_do_not_starve_another_agents_first_run(tmp_path: Path) -> None:
    """Eight sync tools that time out and keep their threads: asyncio's default pool (6 threads on two
    cores) used to be full, and a new agent's first run (client setup runs in a thread) waited for them."""
    release = threading.Event()

    @tool(timeout=0.1)
    def stuck(n: int) -> str:
        """Block until released."""
        release.wait(60)
        return "late"

    calls = [ToolCall("stuck", {"n": i}) for i in range(8)]

    async def main(server: FakeServer) -> None:
        first = lib_agent(server, tmp_path / "a", tools=[stuck])
        result = await first.run("go")
        assert result.status == "success"
        assert sum("timed out" in m["content"] for m in result.messages if m["role"] == "tool") == 8
        second = lib_agent(server, tmp_path / "b")
        answer = await asyncio.wait_for(second.run("hello"), 30)  # a hang guard, not a timing assert
        assert answer.result == "hi" and not release.is_set()
        await asyncio.gather(first.aclose(), second.aclose())

    try:
        with FakeServer([Reply(tool_calls=calls), Reply(content="moved on"), Reply(content="hi")]) as server:
            asyncio.run(main(server))
    finally:
        release.set()


def test_run_sync_returns_while_a_timed_out_sync_tool_still_blocks(server: FakeServer, tmp_path: Path) -> None:
    """`run_sync` used to wait (in asyncio.run's executor shutdown) for the abandoned thread."""
    release = threading.Event()
    timer = threading.Timer(20, release.set)  # frees the thread if run_sync waits for it (the old bug)
    timer.start()

    @tool(timeout=0.1)
    def stuck() -> str:
        """Block until released."""
        release.wait(60)
        return "late"

    server.add(Reply(tool_calls=[ToolCall("stuck", {})]), Reply(content="moved on"))
    try:
        result = lib_agent(server, tmp_path, tools=[stuck]).run_sync("go")
        assert not release.is_set(), "run_sync waited for the abandoned thread"
        assert result.result == "moved on"
    finally:
        release.set()
        timer.cancel()


SCRIPT = """
import asyncio, sys, time
from pathlib import Path
from kimicode import Agent, tool
from kimicode.testing import FakeServer, Reply, ToolCall

late = Path(sys.argv[1])

@tool(timeout={timeout})
def slow() -> str:
    \"\"\"Sleep, then write a file.\"\"\"
    print("started", flush=True)
    time.sleep(30)
    late.write_text("late side effect")
    return "done"

with FakeServer([Reply(tool_calls=[ToolCall("slow", {{}})]), Reply(content="moved on")]) as server:
    agent = Agent(base_url=server.base_url, api_key="sk-test", workspace=Path(sys.argv[2]),
                  home=Path(sys.argv[3]), tools=[slow])
    result = agent.run_sync("go")
    print("result", result.status, flush=True)
"""


@pytest.mark.prepush
@pytest.mark.parametrize("how", ["exit", "ctrl-c"])
def test_exit_and_ctrl_c_do_not_wait_for_an_abandoned_sync_tool(tmp_path: Path, how: str) -> None:
    """The program ends at once (it used to wait up to the tool's end), and the tool's late write never lands:
    its thread dies with the process."""
    late = tmp_path / "late.txt"
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    code = SCRIPT.format(timeout=0.2 if how == "exit" else 60)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(late), str(ws), str(home)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started"
        if how == "ctrl-c":
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)  # a hang guard: the tool sleeps 30 s
    finally:
        proc.kill()
    assert not late.exists()
    if how == "exit":
        assert "result success" in out, err
    else:
        assert "Traceback" not in err or "KeyboardInterrupt" in err


# -- streams abandoned by any means -------------------------------------------------------------------------


def slow_answer(request: RecordedRequest) -> Reply:
    last = request.body["messages"][-1]
    text = last["content"] if isinstance(last["content"], str) else ""
    return Reply(content=f"answer to {text} " + "word " * 40, chunk_size=4, chunk_delay=0.01)


@pytest.mark.prepush
@pytest.mark.parametrize("how", ["break", "garbage"])
def test_a_stream_left_without_async_with_cancels_its_turn(tmp_path: Path, how: str) -> None:
    """`async for ... break` (no `async with`) or dropping the stream: the next run is its own turn (it used to
    return the previous turn's text with status success)."""

    async def main(server: FakeServer) -> None:
        agent = lib_agent(server, tmp_path)
        if how == "break":
            async for event in agent.stream("first"):
                if isinstance(event, ContentDelta):
                    break
        else:
            events = agent.stream("first")
            await events.__anext__()
            del events
            gc.collect()
        result = await agent.run("second")
        assert result.status == "success"
        assert result.result.startswith("answer to second"), result.result
        assert_valid_history(agent.messages, alternating=True)
        await agent.aclose()

    with FakeServer([slow_answer] * 3) as server:
        asyncio.run(main(server))


@pytest.mark.prepush
def test_an_interrupted_streamed_turn_leaves_no_two_user_messages_in_a_row(tmp_path: Path) -> None:
    """Interrupted before the model said anything: the history used to end with the user's message, and the
    next prompt made two user messages in a row (some servers refuse that)."""

    async def main(server: FakeServer) -> None:
        agent = lib_agent(server, tmp_path)
        async with agent.stream("first") as events:
            async for event in events:
                if type(event).__name__ == "StepStarted":
                    agent.interrupt()
        await agent.run("second")
        assert_valid_history(agent.messages, alternating=True)
        sent = server.requests[-1].body["messages"]
        assert [m["role"] for m in sent][-3:] == ["user", "assistant", "user"]
        await agent.aclose()

    with FakeServer([Reply(content="slow " * 50, chunk_delay=0.05), Reply(content="ok")]) as server:
        asyncio.run(main(server))


# -- callbacks that block ---------------------------------------------------------------------------------


def test_a_sync_approve_callback_does_not_block_the_event_loop(server: FakeServer, tmp_path: Path) -> None:
    """The callback waits for something only the loop can do; run on the loop it deadlocked (until its own
    5 s guard gave up and refused)."""
    server.add(Reply(tool_calls=[ToolCall("bash", {"command": "touch made.txt"})]), Reply(content="done"))

    async def main() -> None:
        loop_ran = threading.Event()

        def approve(request: ApprovalRequest) -> bool:
            asyncio.run_coroutine_threadsafe(ping(), loop)
            return loop_ran.wait(5)

        async def ping() -> None:
            loop_ran.set()

        loop = asyncio.get_running_loop()
        agent = lib_agent(server, tmp_path, approve=approve)
        result = await agent.run("go")
        assert loop_ran.is_set() and not result.permission_denials
        assert (tmp_path / "ws" / "made.txt").exists()
        await agent.aclose()

    asyncio.run(main())


def test_an_async_on_event_hook_is_refused_at_construction(server: FakeServer, tmp_path: Path) -> None:
    async def hook(event: Event) -> None:
        pass

    with pytest.raises(TypeError, match="on_event"):
        lib_agent(server, tmp_path, on_event=hook)


class Fail(BaseException):
    """What `pytest.fail` raises: a BaseException."""


def test_a_hook_raising_a_base_exception_stays_in_its_turn(server: FakeServer, tmp_path: Path) -> None:
    def hook(event: Event) -> None:
        if isinstance(event, ToolCallStarted):
            raise Fail("assertion in a hook")

    @tool
    def noop() -> str:
        """Do nothing."""
        return "ok"

    server.add(Reply(tool_calls=[ToolCall("noop", {})]), Reply(content="finished"))
    result = lib_agent(server, tmp_path, tools=[noop], on_event=hook).run_sync("go")
    assert result.status == "success" and result.result == "finished"
    assert len(result.hook_errors) == 1 and "Fail" in result.hook_errors[0]


def test_batch_hooks_raising_anything_stay_in_their_task(tmp_path: Path) -> None:
    """A hook that fails like `pytest.fail` (a BaseException), in the agent's events or in the batch's
    progress callback, used to end the whole batch with 0 of 30 results."""
    from kimicode.batch import run

    def hook(event: Event) -> None:
        if isinstance(event, ToolCallStarted):
            raise Fail("hook")

    def progress(kind: str, task: Any, attempt: int) -> None:
        if task.id == "t3":
            raise Fail("progress")

    @tool
    def noop() -> str:
        """Do nothing."""
        return "ok"

    def script(request: RecordedRequest) -> Reply:
        if request.body["messages"][-1]["role"] == "user":
            return Reply(tool_calls=[ToolCall("noop", {})])
        return Reply(content="done")

    async def main(server: FakeServer) -> dict[str, Any]:
        out = {}
        async for r in run(
            [{"id": f"t{i}", "prompt": f"p{i}"} for i in range(6)],
            base_url=server.base_url,
            api_key="sk-test",
            model="kimi-k3",
            root=tmp_path / "batch",
            retry_base_delay=0.01,
            on_event=progress,
            agent_options={"on_event": hook, "extra_tools": [noop]},
        ):
            out[r.id] = r
        return out

    with FakeServer([script] * 40) as server, pytest.warns(RuntimeWarning, match="Fail: progress"):
        results = asyncio.run(main(server))
    assert sorted(results) == [f"t{i}" for i in range(6)]
    assert all(r.status == "success" for r in results.values()), {k: r.error for k, r in results.items()}
