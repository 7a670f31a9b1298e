"""The library's seams, continued (issue 35, "embedding the library", findings 5-7): the session store's
thread, Agent.run's type, cost, tool results, errors and the documented client wrapper. Each fails on the code
before the fix."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import json
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from branches_helpers import GOOD, VERIFY, WRONG, git_project
from helpers import lib_agent
from pydantic import BaseModel

import kimicode
from kimicode import Agent, Completion, StreamEvent, tool
from kimicode.llm.client import ChatClient, ClientConfig
from kimicode.testing import FakeServer, Reply, ToolCall

# -- 5. the session store is called from one thread ---------------------------------------------------------------


class SqliteStore:
    """A store on sqlite3 as it is: its connection refuses every thread but the one that made it."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path)
        self.db.execute("create table records (session text, record text)")
        self.threads: set[str] = set()

    def append(self, session_id: str, record: dict[str, Any]) -> None:
        self.threads.add(threading.current_thread().name)
        self.db.execute("insert into records values (?, ?)", (session_id, json.dumps(record)))

    def load(self, session_id: str) -> list[dict[str, Any]]:
        self.threads.add(threading.current_thread().name)
        rows = self.db.execute("select record from records where session = ?", (session_id,))
        return [json.loads(row) for (row,) in rows]


class FixingClient:
    """Each branch's first request writes app.py (WRONG for the first branch asked, GOOD after), then answers."""

    def __init__(self) -> None:
        self.contents = itertools.chain([WRONG], itertools.repeat(GOOD))
        self.requests = 0

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        max_completion_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        self.requests += 1
        if messages[-1]["role"] == "user":
            args = json.dumps({"path": "app.py", "content": next(self.contents)})
            call = {
                "id": f"call_{self.requests}",
                "type": "function",
                "function": {"name": "write_file", "arguments": args},
            }
            yield Completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls", None)
        else:
            yield Completion(
                {"role": "assistant", "content": "fixed"}, "stop", {"prompt_tokens": 100, "completion_tokens": 5}
            )

    async def aclose(self) -> None:
        pass


@pytest.mark.slow  # two branches in git worktrees, a verify command each
def test_explore_with_a_plain_sqlite_store(workspace: Path, tmp_path: Path) -> None:
    """explore() opens its branches in a worker thread; their logs read and write the caller's sqlite3 store,
    which must still only be called on the loop's thread."""
    git_project(workspace)
    store = SqliteStore(tmp_path / "sessions.db")
    parent = Agent(
        client=FixingClient(),
        session_store=store,
        workspace=workspace,
        home=tmp_path / "home",
        permission_mode="accept-edits",
    )

    async def go() -> Any:
        try:
            return await parent.explore("fix add", n=2, verify=VERIFY)
        finally:
            await parent.aclose()

    ex = asyncio.run(go())
    assert sorted(b.status for b in ex.branches) == ["failed", "verified"], [b.error for b in ex.branches]
    assert store.threads == {threading.current_thread().name}
    assert all(store.load(b.session_id) for b in ex.branches)


# -- 6. Agent.run and friends are typed --------------------------------------------------------------------------


@pytest.mark.slow
def test_mypy_strict_refuses_a_misused_agent_run_and_types_the_output(tmp_path: Path) -> None:
    client = tmp_path / "client.py"
    client.write_text(
        textwrap.dedent("""
        import asyncio

        from pydantic import BaseModel

        from kimicode import Agent


        class Release(BaseModel):
            version: str


        async def main(agent: Agent) -> None:
            await agent.run(123, "extra", bogus=True)
            result = agent.run_sync("ok", output_type=Release)
            reveal_type(result.output)
            agent.stream("ok", output_type=Release, bogus=1)
            version: int = (await agent.run("x", output_type=Release)).output.version


        asyncio.run(main(Agent()))
    """)
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), str(client)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    out = done.stdout
    assert done.returncode == 1, out
    assert 'client.py:14: error: No overload variant of "run" of "Agent" matches argument types "int"' in out
    assert 'client.py:14: error: Unexpected keyword argument "bogus"' in out
    assert 'client.py:16: note: Revealed type is "client.Release"' in out  # RunResult[Release].output
    assert 'client.py:17: error: Unexpected keyword argument "bogus" for overloaded function "stream"' in out
    assert "client.py:18: error: Incompatible types in assignment" in out  # .output.version is a str


# -- 7. cost, tool results, errors, clients ----------------------------------------------------------------------

PRICES = {"input": 1.0, "cached_input": 0.1, "output": 2.0}


def test_total_cost_goes_on_across_resume_and_is_none_without_usage(server: FakeServer, tmp_path: Path) -> None:
    server.add(
        Reply(content="one", usage={"prompt_tokens": 1_000_000, "completion_tokens": 0}),
        Reply(content="two", usage={"prompt_tokens": 1_000_000, "completion_tokens": 0}),
        Reply(content="three", usage_mode="none"),
    )
    first = lib_agent(server, tmp_path, prices=PRICES).run_sync("agent-0 one")
    assert first.cost == pytest.approx(1.0) and first.total_cost == pytest.approx(1.0)
    again = Agent.resume(
        first.session_id,
        home=tmp_path / "home",
        base_url=server.base_url,
        api_key="sk-test",
        prices=PRICES,
        retry_base_delay=0.01,
    )
    second = again.run_sync("agent-0 two")
    assert second.cost == pytest.approx(1.0) and second.total_cost == pytest.approx(2.0)
    third = again.run_sync("agent-0 three")  # the server said nothing of usage: unknown, not free
    assert third.cost is None and third.total_cost == pytest.approx(2.0)


class Point(BaseModel):
    x: int
    y: int


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Point(x=1, y=2), {"x": 1, "y": 2}),
        ([Point(x=0, y=0)], [{"x": 0, "y": 0}]),
        ({"when": datetime.datetime(2026, 12, 7, 17, 30, tzinfo=datetime.UTC)}, {"when": "2026-12-07T17:30:00Z"}),
    ],
)
def test_tool_results_are_json(server: FakeServer, tmp_path: Path, value: Any, expected: Any) -> None:
    @tool
    def give() -> Any:
        """Return data."""
        return value

    server.add(Reply(tool_calls=[ToolCall("give", {})]), Reply(content="ok"))
    result = lib_agent(server, tmp_path, tools=[give]).run_sync("agent-0 go")
    content = next(m for m in result.messages if m["role"] == "tool")["content"]
    assert json.loads(content) == expected


def test_a_datetime_alone_is_iso_8601(server: FakeServer, tmp_path: Path) -> None:
    @tool
    def now() -> datetime.datetime:
        """Now."""
        return datetime.datetime(2026, 12, 7, 17, 30, tzinfo=datetime.UTC)

    server.add(Reply(tool_calls=[ToolCall("now", {})]), Reply(content="ok"))
    result = lib_agent(server, tmp_path, tools=[now]).run_sync("agent-0 go")
    assert next(m for m in result.messages if m["role"] == "tool")["content"] == "2026-12-07T17:30:00Z"


class Raising:
    """A client of the caller's that fails the documented way, with the subclass alone."""

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        max_completion_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        raise kimicode.RateLimitError("slow down")
        yield  # an async generator

    async def aclose(self) -> None:
        pass


def test_model_errors_can_be_made_with_a_message_alone(tmp_path: Path) -> None:
    err = kimicode.RateLimitError("slow down")
    assert (err.kind, err.status, str(err), err.transient) == ("transient", 429, "slow down", True)
    assert kimicode.AuthError("no").kind == "auth" and isinstance(kimicode.ContextLengthError("x"), kimicode.ModelError)
    with pytest.raises(TypeError, match="needs a kind"):
        kimicode.ModelError("which?")
    result = Agent(client=Raising(), workspace=tmp_path, home=tmp_path / "home").run_sync("hi")
    assert (result.status, result.error_kind, result.error) == ("error", "transient", "slow down")
    assert isinstance(result.error.exception(), kimicode.RateLimitError)


class TwoAnswers:
    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        max_completion_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        yield Completion({"role": "assistant", "content": "one"}, "stop", None)
        yield Completion({"role": "assistant", "content": "two"}, "stop", None)

    async def aclose(self) -> None:
        pass


def test_two_completions_from_a_callers_client_are_refused(tmp_path: Path) -> None:
    agent = Agent(client=TwoAnswers(), workspace=tmp_path, home=tmp_path / "home")
    result = agent.run_sync("hi")
    assert (result.status, result.error_kind) == ("error", "protocol")
    assert "after its Completion" in result.error
    assert not any(m.get("role") == "assistant" and m.get("content") in ("one", "two") for m in agent.messages)


class Recording:
    """The documented wrapper: kimicode's ChatClient inside a client of the caller's."""

    def __init__(self, inner: ChatClient) -> None:
        self.inner, self.requests = inner, 0

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        max_completion_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        self.requests += 1
        async for event in self.inner.stream(messages, tools, max_completion_tokens=max_completion_tokens):
            yield event

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_a_wrapped_chat_client_works_for_every_run_sync(server: FakeServer, tmp_path: Path) -> None:
    server.add(Reply(content="one"), Reply(content="two"))
    client = Recording(
        ChatClient(ClientConfig(base_url=server.base_url, api_key="sk-test", model="kimi-k3", max_retries=0))
    )
    agent = Agent(client=client, workspace=tmp_path, home=tmp_path / "home")
    assert agent.run_sync("hi").result == "one"
    second = agent.run_sync("again")  # a new event loop, after run_sync closed the client
    assert (second.status, second.result, client.requests) == ("success", "two", 2)


def test_library_errors_name_options_not_command_line_flags(server: FakeServer, tmp_path: Path) -> None:
    server.add(Reply(tool_calls=[ToolCall("read_file", {"path": "x"})]))
    limited = lib_agent(server, tmp_path, max_turns=1).run_sync("agent-0 go")
    assert limited.status == "max_turns" and "max_turns=1" in limited.error and "--" not in limited.error
    with socket_closed() as url:
        gone = lib_agent(server, tmp_path, base_url=url, max_retries=0).run_sync("agent-0 go")
    assert gone.status == "error" and "cannot reach" in gone.error
    assert "base_url" in gone.error and "--base-url" not in gone.error


class socket_closed:
    """A base URL on a local port nothing listens on."""

    def __enter__(self) -> str:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    def __exit__(self, *exc: object) -> None:
        pass


@pytest.mark.parametrize(
    ("setting", "option"), [({"model": "bad model!"}, "model"), ({"base_url": "ftp://x"}, "base_url")]
)
def test_a_bad_setting_is_named_as_the_option_given(tmp_path: Path, setting: dict[str, str], option: str) -> None:
    with pytest.raises(kimicode.ConfigError) as refused:
        Agent(api_key="sk-test", workspace=tmp_path, home=tmp_path / "home", **setting)
    assert f"from {option}" in str(refused.value) and "--" not in str(refused.value)
