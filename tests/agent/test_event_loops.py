"""An agent used from several event loops one after the other (a script calling `asyncio.run` per step, a
test suite, a notebook restarting its loop): pooled connections belong to the loop that opened them, so the
agent opens new ones on a new loop and never touches the old loop (which may be closed)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kimicode import Agent
from kimicode.testing import FakeServer, Reply


def test_an_agent_runs_on_successive_event_loops_and_closes_from_another(tmp_path: Path) -> None:
    with FakeServer([Reply(content="one"), Reply(content="two"), Reply(content="three")]) as server:
        agent = Agent(
            base_url=server.base_url, api_key="sk-test", model="kimi-k3", workspace=tmp_path, home=tmp_path / "home"
        )
        first = asyncio.run(agent.run("a"))
        opened = server.connections_opened
        second = asyncio.run(agent.run("b"))  # the first loop is closed; its connection cannot be reused
        assert (first.status, first.result, second.status, second.result) == ("success", "one", "success", "two")
        assert server.connections_opened == opened + 1
        asyncio.run(agent.aclose())  # closes from a third loop without touching the closed ones
        third = agent.run_sync("c")
        assert (third.status, third.result) == ("success", "three")
        # the second request carries the first answer: the history went on across loops
        assert [m["content"] for m in server.requests[2].body["messages"] if m["role"] == "assistant"] == ["one", "two"]
