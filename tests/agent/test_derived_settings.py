"""Settings resolved once and derived through one function: the answer limit reaches every request by one
route, and a fork and a subagent carry the same run-time values (a fork used to drop the resolved answer
limit back to its default while a subagent froze it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kimicode import Agent, AgentOptions
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall


def limit_of(request: RecordedRequest) -> Any:
    body = request.body
    return body.get("max_completion_tokens", body.get("max_tokens"))


def configured_agent(server: FakeServer, tmp_path: Path, **kw: Any) -> Agent:
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir(parents=True, exist_ok=True)
    ws.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[context]\nmax_tokens = 1234\n")
    options = AgentOptions.from_workspace(
        ws, home=home, base_url=server.base_url, api_key="sk-test", retry_base_delay=0.01, context_window=200_000, **kw
    )
    return Agent(options)


def test_the_configured_answer_limit_reaches_parent_fork_and_subagent_alike(server: FakeServer, tmp_path: Path) -> None:
    def child(request: RecordedRequest) -> Reply:
        return Reply(content="child done")

    server.add(
        Reply(content="parent"),
        Reply(content="fork"),
        Reply(tool_calls=[ToolCall("task", {"description": "look", "prompt": "look around"})]),
        child,
        Reply(content="after task"),
    )
    parent = configured_agent(server, tmp_path)
    parent.set_thinking("low")
    assert parent.run_sync("hello").ok
    fork = parent.fork()
    assert fork.options.max_completion_tokens == parent.max_completion_tokens == 1234
    assert fork.run_sync("fork turn").ok
    assert parent.run_sync("delegate").ok
    limits = [limit_of(r) for r in server.requests]
    assert limits == [1234] * 5, limits  # parent, fork, parent, subagent, parent
    efforts = {str(r.body.get("reasoning_effort")) for r in server.requests}
    assert len(efforts) == 1, efforts  # the fork and the subagent keep the parent's effort


def test_the_max_tokens_option_wins_over_the_config_everywhere(server: FakeServer, tmp_path: Path) -> None:
    server.add(Reply(content="a"), Reply(content="b"))
    parent = configured_agent(server, tmp_path, max_completion_tokens=99)
    parent.run_sync("one")
    parent.fork().run_sync("two")
    assert [limit_of(r) for r in server.requests] == [99, 99]
