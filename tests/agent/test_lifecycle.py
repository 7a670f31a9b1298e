"""Lifecycle: an idle Agent writes nothing and holds no descriptor; the HTTP stack is imported off the
event loop; run_sync() inside a loop says what to do instead."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from kimicode import Agent, UsageError
from kimicode.session.log import load
from kimicode.testing import FakeServer, Reply

MakeAgent = Callable[..., Agent]


def run_script(code: str, env_extra: dict[str, str], timeout: float = 120) -> str:
    env = {**os.environ, **env_extra}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.prepush
@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_NOFILE is POSIX")
def test_a_thousand_idle_agents_hold_no_descriptor_and_write_nothing(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    out = run_script(
        """
        import json, os, resource, sys
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))  # the 129th open log would fail
        from kimicode import Agent
        agents = [Agent(api_key="k", base_url="http://127.0.0.1:9/v1", workspace=sys.argv[-1]) for _ in range(1000)]
        forks = [a.fork() for a in agents[:50]]  # a fork of an idle agent is idle too
        print(json.dumps({"ids": len({a.session_id for a in agents + forks})}))
        """.replace("sys.argv[-1]", repr(str(ws))),
        {"KIMICODE_HOME": str(home)},
    )
    assert json.loads(out) == {"ids": 1050}
    assert not home.exists() or not any(home.rglob("*.jsonl")), "an idle Agent wrote a session file"
    assert list(ws.iterdir()) == []


def test_the_first_turn_writes_the_held_records_in_order(server: FakeServer, make_agent: MakeAgent) -> None:
    parent = make_agent()
    parent.set_thinking("low")  # a settings record before the session exists
    child = parent.fork()
    assert parent.log is not None and child.log is not None
    assert not parent.log.path.exists() and not child.log.path.exists()
    server.add(Reply(content="child answer"))
    assert child.run_sync("hello").ok
    types = [r["type"] for r in load(child.log.path).records]
    assert types[:3] == ["meta", "message", "settings"]  # meta, the copied history, then the fork record
    assert load(child.log.path).records[2]["reason"] == "fork"
    assert load(child.log.path).messages == child.messages
    assert not parent.log.path.exists()  # the parent never ran


def test_a_session_starts_on_disk_with_its_first_prompt(server: FakeServer, make_agent: MakeAgent) -> None:
    history = [{"role": "system", "content": "s"}]
    server.add(Reply(content="## Goal\nsummary"))
    agent = make_agent(messages=history)
    assert agent.log is not None

    async def main() -> None:
        try:
            await agent.compact()  # nothing to compact: still nothing written
            assert not agent.log.path.exists()  # type: ignore[union-attr]
            server.add(Reply(content="hi"))
            await agent.run("hello")
        finally:
            await agent.aclose()

    asyncio.run(main())
    loaded = load(agent.log.path)
    assert loaded.records[0]["type"] == "meta"
    assert loaded.messages == agent.messages


def test_run_sync_inside_a_running_loop_says_to_await_run(make_agent: MakeAgent) -> None:
    agent = make_agent(persist=False)

    async def main() -> None:
        with pytest.raises(UsageError, match=r"await agent\.run\(") as info:
            agent.run_sync("hi")
        assert isinstance(info.value, RuntimeError)

    asyncio.run(main())


@pytest.mark.prepush
def test_the_http_stack_is_imported_off_the_event_loop(server: FakeServer, tmp_path: Path) -> None:
    """In a fresh interpreter: `openai` is imported by a worker thread, and a 10 ms ticker keeps ticking
    during the first request (the loop used to stall for the whole import: 0.3 s here, seconds on a
    cold disk). The lag bound is generous for loaded CI machines; tests/bench/loop_lag.py prints the figure."""
    server.add(Reply(content="hello"))
    ws = tmp_path / "ws"
    ws.mkdir()
    out = run_script(
        f"""
        import asyncio, json, sys, threading, time
        import importlib.abc

        where = {{}}

        class Spy(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "openai" and name not in where:
                    where[name] = threading.current_thread() is threading.main_thread()
                return None

        sys.meta_path.insert(0, Spy())
        from kimicode import Agent

        async def main():
            agent = Agent(api_key="k", base_url={server.base_url!r}, workspace={str(ws)!r}, persist=False)
            lags, stop = [], False

            async def ticker():
                last = time.perf_counter()
                while not stop:
                    await asyncio.sleep(0.01)
                    now = time.perf_counter()
                    lags.append(now - last - 0.01)
                    last = now

            task = asyncio.create_task(ticker())
            await asyncio.sleep(0.03)
            result = await agent.run("hi")
            stop = True
            await task
            await agent.aclose()
            return result.status, max(lags)

        status, lag = asyncio.run(main())
        print(json.dumps({{"status": status, "lag_ms": lag * 1000, "main_thread": where.get("openai")}}))
        """,
        {"KIMICODE_HOME": str(tmp_path / "home")},
    )
    report = json.loads(out)
    assert report["status"] == "success"
    assert report["main_thread"] is False, "openai was imported on the event loop's thread"
    assert report["lag_ms"] < 500, report  # generous: 2 loaded cores; the old import stalled 0.4-1.3 s
