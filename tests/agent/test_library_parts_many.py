"""Attacks on the parts (issue 24) with many agents at once and with the issue's original list: 50 agents in
one process on the fake server, each with its own store, tools and key; a sqlite3 store (which refuses
other threads); an abandoned stream, cost, rewind errors with a caller's own client and store."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers import MemoryStore, history_problems

import kimicode
from kimicode import Agent, Completion, StreamDelta, StreamEvent, tool
from kimicode.events import ContentDelta
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall
from kimicode.tools.base import Tool

KEY_VARIABLES = ("KIMI_API_KEY", "MOONSHOT_API_KEY", "OPENAI_API_KEY", "KIMI_BASE_URL", "OPENAI_BASE_URL")
AGENTS = 50


@pytest.fixture(autouse=True)
def no_endpoint_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings(k), *strings(v))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in strings(v)]
    return []


def note_tool(owner: int, calls: list[str]) -> Tool:
    """A tool of one agent's own (same name for every agent): it records who called it."""

    @tool
    def note(text: str) -> str:
        """Keep a note."""
        calls.append(text)
        return f"noted by {owner}: {text}"

    return note


def route(request: RecordedRequest) -> Reply:
    """The fake model: it answers each request from that request alone, so crossed wires show."""
    messages = request.body["messages"]
    prompt = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    key = request.headers.get("authorization", "").removeprefix("Bearer ")
    if messages[-1]["role"] == "user":
        return Reply(reasoning=f"thinking about {prompt}", tool_calls=[ToolCall("note", {"text": prompt})])
    return Reply(content=f"{messages[-1]['content']} (my key is {key})")


@pytest.mark.prepush
@pytest.mark.parametrize("one_store", [False, True], ids=["a-store-each", "one-store-for-all"])
def test_fifty_agents_at_once_keep_their_own_results_stores_tools_and_parts(
    one_store: bool, server: FakeServer, tmp_path: Path
) -> None:
    server.add(*(route for _ in range(AGENTS * 4)))
    home = tmp_path / "home"  # one KIMICODE_HOME, as a harness running many agents has
    calls: list[list[str]] = [[] for _ in range(AGENTS)]
    shared = MemoryStore()  # one database for every session, as a service has
    stores = [shared if one_store else MemoryStore() for _ in range(AGENTS)]
    keys = [f"sk-agent-{i:02d}-{'x' * 24}" for i in range(AGENTS)]
    agents = []
    for i in range(AGENTS):
        ws = tmp_path / f"ws{i}"
        ws.mkdir()
        agents.append(
            Agent(
                session_store=stores[i],
                tools=[note_tool(i, calls[i])],
                base_url=server.base_url,
                api_key=keys[i],
                workspace=ws,
                home=home,
                retry_base_delay=0.01,
            )
        )

    async def one(i: int) -> list[Any]:
        agent = agents[i]
        try:
            return [await agent.run(f"task-{i}-a"), await agent.run(f"task-{i}-b")]
        finally:
            await agent.aclose()

    async def main() -> list[list[Any]]:
        return list(await asyncio.gather(*(one(i) for i in range(AGENTS))))

    results = asyncio.run(main())
    assert len(server.requests) == AGENTS * 4
    for i, (a, b) in enumerate(results):
        agent = agents[i]
        assert (a.status, b.status) == ("success", "success"), (i, a.error, b.error)
        assert a.result == f"noted by {i}: task-{i}-a (my key is ***)"  # the key masked in the result
        assert b.result == f"noted by {i}: task-{i}-b (my key is ***)"
        assert calls[i] == [f"task-{i}-a", f"task-{i}-b"]  # its own tool, called for its own prompts only
        assert agent.session_id in stores[i].sessions and (one_store or len(stores[i].sessions) == 1)
        records = stores[i].sessions[agent.session_id]
        assert [r["message"] for r in records if r["type"] == "message"] == [
            json.loads(json.dumps(m).replace(keys[i], "***")) for m in agent.messages
        ]
        text = strings(records)
        assert not [s for s in text if "sk-agent-" in s]  # no agent's key reached any store
        assert not [s for s in text if "task-" in s and f"task-{i}-" not in s]  # nor another agent's prompts
        assert history_problems(agent.messages, system_first=True, alternating=True) == []
    # no part of one agent is another's: the objects each agent works with are its own
    for name in ("context", "policy", "tools", "log", "ctx", "usage", "messages", "masker", "checkpoints"):
        parts = [getattr(a.parts, name) for a in agents]
        assert len({id(p) for p in parts}) == AGENTS, name
    assert len({id(a.parts.resolved) for a in agents}) == AGENTS
    assert len({a.session_id for a in agents}) == AGENTS
    assert sum(len(store.sessions) for store in {id(s): s for s in stores}.values()) == AGENTS


def test_what_one_agent_changes_stays_in_that_agent(tmp_path: Path) -> None:
    """Settings, tools and rules are per agent: no module-level cache or class attribute carries them."""
    agents = [
        Agent(api_key="sk-test", base_url="http://127.0.0.1:9/v1", workspace=tmp_path, home=tmp_path / "h")
        for _ in range(3)
    ]
    first, others = agents[0], agents[1:]
    first.set_model("gpt-5")
    first.set_thinking("max")
    first.set_permission_mode("yolo")
    first.tools.remove("bash")
    first.max_turns = 3
    for other in others:
        assert other.endpoint.model == "kimi-k3" and other.options.model is None
        assert other.thinking is None and other.permission_mode == "default"
        assert "bash" in other.tools.names and other.max_turns == 200
        assert other.profile is not first.profile or other.profile == first.profile
    assert type(first).max_turns is type(others[0]).max_turns  # descriptors on the class, values per agent
    assert first.parts.resolved.endpoint.model == "gpt-5" and first.options.max_turns == 3


class SqliteStore:
    """A caller's store on sqlite3, whose connection refuses to be used from any other thread."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path)
        self.db.execute("create table records (session text, record text)")
        self.threads: set[str] = set()

    def append(self, session_id: str, record: dict[str, Any]) -> None:
        self.threads.add(threading.current_thread().name)
        self.db.execute("insert into records values (?, ?)", (session_id, json.dumps(record)))

    def load(self, session_id: str) -> list[dict[str, Any]]:
        rows = self.db.execute("select record from records where session = ?", (session_id,))
        return [json.loads(row) for (row,) in rows]


class Scripted:
    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        max_completion_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        answer = self.answers.pop(0)
        if answer == "hang":
            yield StreamDelta("content", "the old turn's text")
            await asyncio.Event().wait()
        yield Completion(
            answer,
            "tool_calls" if answer.get("tool_calls") else "stop",
            {"prompt_tokens": 2_000, "completion_tokens": 500},
        )

    async def aclose(self) -> None:
        pass


def write(path: str, content: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "w1",
                "type": "function",
                "function": {"name": "write_file", "arguments": json.dumps({"path": path, "content": content})},
            }
        ],
    }


def test_a_sqlite_store_is_only_called_on_the_event_loops_thread_also_by_checkpoints_and_rewind(tmp_path: Path) -> None:
    """hole: the checkpoint before a turn's first edit, and rewind, run in a worker thread and logged from
    there: a sqlite3 store refused every turn that edited a file ("SQLite objects created in a thread can
    only be used in that same thread"), status error; the records are handed to the loop now."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("old\n")
    store = SqliteStore(tmp_path / "sessions.db")
    agent = Agent(
        client=Scripted(write("f.txt", "new\n"), {"role": "assistant", "content": "written"}),
        session_store=store,
        permission_mode="accept-edits",
        workspace=ws,
        home=tmp_path / "home",
    )

    async def main() -> tuple[Any, Any]:
        try:
            result = await agent.run("change it")
            return result, await agent.rewind()
        finally:
            await agent.aclose()

    result, undone = asyncio.run(main())
    assert (result.status, result.error) == ("success", None)
    assert undone.files == ["f.txt"] and (ws / "f.txt").read_text() == "old\n"
    assert store.threads == {threading.current_thread().name}
    kinds = [r["type"] for r in store.load(agent.session_id)]
    assert kinds.count("checkpoint") >= 2 and "turn_end" in kinds
    again = Agent.resume(agent.session_id, session_store=store, client=Scripted(), workspace=ws, home=tmp_path / "home")
    assert again.messages == agent.messages  # the store replays to the rewound history
    fresh = Agent(client=Scripted(), session_store=store, workspace=ws, home=tmp_path / "home")
    with pytest.raises(kimicode.CheckpointError) as nothing_left:  # nothing to rewind
        asyncio.run(fresh.rewind())
    assert isinstance(nothing_left.value, kimicode.KimicodeError)


def test_an_abandoned_stream_with_a_callers_client_and_store_is_cancelled_and_recorded(tmp_path: Path) -> None:
    store = MemoryStore()
    agent = Agent(
        client=Scripted("hang", {"role": "assistant", "content": "the new answer"}),
        session_store=store,
        workspace=tmp_path,
        home=tmp_path / "home",
    )

    async def main() -> Any:
        async for event in agent.stream("first"):  # no `async with`, and left with break
            if isinstance(event, ContentDelta):
                break
        return await agent.run("second")

    result = asyncio.run(main())
    assert (result.status, result.result) == ("success", "the new answer")
    records = store.sessions[agent.session_id]
    assert [r["status"] for r in records if r["type"] == "turn_end"] == ["interrupted", "success"]
    replayed = [r["message"] for r in records if r["type"] == "message"]
    assert replayed == agent.messages
    assert history_problems(replayed, system_first=True, alternating=True) == []  # never two user messages


def test_cost_and_prices_with_a_callers_client(tmp_path: Path) -> None:
    agent = Agent(
        client=Scripted({"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}),
        prices={"input": 2.0, "output": 10.0},
        workspace=tmp_path,
        home=tmp_path / "home",
    )
    first = agent.run_sync("one")
    second = agent.run_sync("two")
    per_turn = (2_000 * 2.0 + 500 * 10.0) / 1e6  # USD per million tokens
    assert (first.status, second.status) == ("success", "success")
    assert first.cost == pytest.approx(per_turn) and second.cost == pytest.approx(per_turn)
    assert second.total_cost == pytest.approx(2 * per_turn)
    unpriced = Agent(
        client=Scripted({"role": "assistant", "content": "a"}), workspace=tmp_path, home=tmp_path / "home"
    ).run_sync("one")
    assert unpriced.cost is None  # no price known for a client of the caller's: no made-up figure


class FailsToClose(Scripted):
    async def aclose(self) -> None:
        raise RuntimeError("the caller's connection pool failed to close")


def test_a_client_that_fails_to_close_loses_no_result_and_leaves_no_session_locked(tmp_path: Path) -> None:
    """hole: `run_sync` raised the client's close error, losing the RunResult of a turn that happened, and
    `aclose()` stopped before closing the session log: the session stayed locked ("in use by another agent in
    this process") and could not be resumed."""
    store = MemoryStore()
    agent = Agent(
        client=FailsToClose({"role": "assistant", "content": "done"}),
        session_store=store,
        workspace=tmp_path,
        home=tmp_path / "home",
    )
    with pytest.warns(RuntimeWarning, match="closing the agent after run_sync failed: RuntimeError"):
        result = agent.run_sync("go")
    assert (result.status, result.result) == ("success", "done")
    later = Agent.resume(
        agent.session_id, session_store=store, client=FailsToClose(), workspace=tmp_path, home=tmp_path / "home"
    )
    assert later.messages == agent.messages
    with pytest.raises(RuntimeError, match="failed to close"):  # a direct aclose() still says so
        asyncio.run(later.aclose())
    assert later.log is not None and later.log.lock is None  # released all the same


def test_a_store_that_cannot_be_read_is_a_session_error(tmp_path: Path) -> None:
    """hole: a store whose `load` raised (its database down) made `Agent(...)` and `Agent.resume(...)` raise
    that raw exception (sqlite3.OperationalError, OSError) instead of a kimicode.SessionError naming the store."""

    class Down(MemoryStore):
        def load(self, session_id: str) -> list[dict[str, Any]]:
            raise sqlite3.OperationalError("unable to open database file")

    for make in (
        lambda: Agent(client=Scripted(), session_store=Down(), workspace=tmp_path),
        lambda: Agent.resume("s1", client=Scripted(), session_store=Down(), workspace=tmp_path),
    ):
        with pytest.raises(
            kimicode.SessionError,
            match=r"the session store Down could not read session .*"
            r"OperationalError: unable to open database file",
        ):
            make()
