"""A caller's own parts (issue 24): their model client (`Agent(client=...)`, the `kimicode.ModelClient`
protocol) and their session store (`Agent(session_store=...)`, `kimicode.SessionStore`), and the parts the
builder returns (`agent.parts`). Every test here failed before: `Agent` took neither."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers import MemoryStore, assert_valid_history

import kimicode
from kimicode import Agent, Completion, StreamDelta, StreamEvent, tool
from kimicode.events import ContentDelta
from kimicode.llm.client import ChatClient, ClientConfig
from kimicode.llm.errors import LLMError
from kimicode.testing import FakeServer, Reply, ToolCall

KEY_VARIABLES = ("KIMI_API_KEY", "MOONSHOT_API_KEY", "OPENAI_API_KEY", "KIMI_BASE_URL", "OPENAI_BASE_URL")


@pytest.fixture(autouse=True)
def no_endpoint_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller with their own client needs no key or endpoint of kimicode's."""
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


class RecordingClient:
    """A caller's client: kimicode's own ChatClient on the real wire, recording what it is asked to send."""

    def __init__(self, server: FakeServer, key: str = "sk-callers-own") -> None:
        self.inner = ChatClient(
            ClientConfig(base_url=server.base_url, api_key=key, model="kimi-k3", retry_base_delay=0.01)
        )
        self.sent: list[list[dict[str, Any]]] = []
        self.closed = 0

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        max_completion_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        self.sent.append(copy.deepcopy(list(messages)))
        async for event in self.inner.stream(messages, tools, max_completion_tokens=max_completion_tokens):
            yield event

    async def aclose(self) -> None:
        self.closed += 1
        await self.inner.aclose()


class ScriptedClient:
    """A caller's client with no server at all: each request gets the next scripted assistant message."""

    def __init__(self, *answers: dict[str, Any] | Exception) -> None:
        self.answers = list(answers)
        self.sent: list[list[dict[str, Any]]] = []
        self.tools: list[list[str]] = []
        self.closed = 0

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        max_completion_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        self.sent.append(copy.deepcopy(list(messages)))
        self.tools.append([t["function"]["name"] for t in tools])
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if answer.get("content"):
            yield StreamDelta("content", answer["content"])
        yield Completion(
            answer,
            "tool_calls" if answer.get("tool_calls") else "stop",
            {"prompt_tokens": 100, "completion_tokens": 10},
        )

    async def aclose(self) -> None:
        self.closed += 1


def call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}],
    }


@tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


def home_of(tmp_path: Path) -> dict[str, Any]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return {"workspace": ws, "home": tmp_path / "home"}


# -- the caller's client ------------------------------------------------------------------------------


def test_a_callers_client_on_the_real_wire_drives_a_multi_turn_tool_loop(server: FakeServer, tmp_path: Path) -> None:
    server.add(
        Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 2})]),
        Reply(tool_calls=[ToolCall("add", {"a": 3, "b": 4}), ToolCall("add", {"a": 5, "b": 6})]),
        Reply(content="3, 7 and 11"),
        Reply(tool_calls=[ToolCall("add", {"a": 10, "b": 20})]),
        Reply(content="30"),
    )
    client = RecordingClient(server)
    agent = Agent(client=client, tools=[add], **home_of(tmp_path))

    async def main() -> tuple[Any, Any]:
        try:
            return await agent.run("add them"), await agent.run("and again")
        finally:
            await agent.aclose()

    first, second = asyncio.run(main())
    assert (first.status, first.result, first.num_turns) == ("success", "3, 7 and 11", 3)
    assert (second.status, second.result) == ("success", "30")
    assert [m["content"] for m in agent.messages if m["role"] == "tool"] == ["3", "7", "11", "30"]
    # what the caller's client was asked to send is exactly what reached the server, through its own key
    assert len(client.sent) == len(server.requests) == 5
    for sent, request in zip(client.sent, server.requests, strict=True):
        assert request.body["messages"] == sent
        assert request.headers.get("authorization") == "Bearer sk-callers-own"
    assert server.other_requests == []  # no window discovery against an endpoint kimicode does not own
    assert client.closed == 1  # aclose() closes the caller's client too
    assert_valid_history(agent.messages, system_first=True)


def test_a_scripted_client_runs_real_tools_and_streams_its_deltas(tmp_path: Path) -> None:
    client = ScriptedClient(
        call("write_file", {"path": "notes.txt", "content": "hello\n"}, "c1"),
        call("read_file", {"path": "notes.txt"}, "c2"),
        {"role": "assistant", "content": "written and read back"},
    )
    agent = Agent(client=client, permission_mode="accept-edits", **home_of(tmp_path))
    deltas: list[str] = []

    async def main() -> None:
        try:
            async for event in agent.stream("write a note"):
                if isinstance(event, ContentDelta):
                    deltas.append(event.text)
        finally:
            await agent.aclose()

    asyncio.run(main())
    assert (tmp_path / "ws" / "notes.txt").read_text() == "hello\n"
    assert deltas == ["written and read back"]
    assert "hello" in str(client.sent[2][-1]["content"])  # the real read_file's result went back to the client
    assert "write_file" in client.tools[0] and "read_file" in client.tools[0]
    assert agent.usage["prompt_tokens"] == 300 and client.closed == 1
    assert_valid_history(agent.messages, system_first=True)


def test_a_callers_client_that_fails_ends_the_turn_with_a_valid_history(tmp_path: Path) -> None:
    client = ScriptedClient(
        call("add", {"a": 1, "b": 1}, "c1"),
        LLMError("the caller's backend is down", "server"),
        {"role": "assistant", "content": "back"},
    )
    agent = Agent(client=client, tools=[add], **home_of(tmp_path))
    failed = agent.run_sync("add")
    assert failed.status == "error" and "backend is down" in str(failed.error)
    assert_valid_history(agent.messages, system_first=True)
    assert agent.run_sync("again").result == "back"  # the same client, the next turn


def test_model_and_effort_changes_keep_the_callers_client(tmp_path: Path) -> None:
    client = ScriptedClient({"role": "assistant", "content": "one"}, {"role": "assistant", "content": "two"})
    agent = Agent(client=client, **home_of(tmp_path))
    agent.run_sync("a")
    agent.set_thinking("high")
    agent.max_retries = 2  # an option that rebuilds kimicode's own client
    assert agent.client is client
    assert agent.run_sync("b").result == "two"


def test_forks_and_subagents_use_the_callers_client(tmp_path: Path) -> None:
    client = ScriptedClient(
        {"role": "assistant", "content": "parent"},
        call("task", {"description": "look", "prompt": "list the files"}, "t1"),
        {"role": "assistant", "content": "the subagent's answer"},  # the subagent's own request
        {"role": "assistant", "content": "done"},
    )
    parent = Agent(client=client, **home_of(tmp_path))
    parent.run_sync("hello")
    child = parent.fork()
    assert child.client is client
    result = child.run_sync("delegate")
    assert result.result == "done"
    assert client.sent[2][-1]["content"].startswith("list the files")  # the subagent asked the caller's client
    assert_valid_history(child.messages, system_first=True)


# -- the caller's session store -------------------------------------------------------------------------


def test_a_callers_store_receives_every_record_and_a_resume_reads_the_history_back(
    server: FakeServer, tmp_path: Path
) -> None:
    server.add(Reply(tool_calls=[ToolCall("add", {"a": 2, "b": 2})]), Reply(content="four"), Reply(content="five"))
    store = MemoryStore()
    first = Agent(session_store=store, tools=[add], base_url=server.base_url, api_key="sk-test", **home_of(tmp_path))
    assert store.sessions == {}  # nothing before the first prompt
    assert first.run_sync("2 + 2?").result == "four"
    records = store.sessions[first.session_id]
    assert [r["type"] for r in records][:2] == ["meta", "message"] and records[-1]["type"] == "turn_end"
    # the messages recorded are exactly the ones sent, in order
    assert [r["message"] for r in records if r["type"] == "message"] == first.messages
    assert server.requests[-1].body["messages"] == first.messages[:-1]
    assert not list((tmp_path / "home").glob("sessions/*.jsonl"))  # no file of kimicode's

    later = Agent.resume(
        first.session_id,
        session_store=store,
        tools=[add],
        base_url=server.base_url,
        api_key="sk-test",
        **home_of(tmp_path),
    )
    assert later.session_id == first.session_id and later.messages == first.messages
    assert later.run_sync("and 2 + 3?").result == "five"
    assert server.requests[-1].body["messages"][: len(first.messages)] == first.messages
    again = [r["message"] for r in store.sessions[first.session_id] if r["type"] == "message"]
    assert again == later.messages and [
        r["reason"] for r in store.sessions[first.session_id] if r["type"] == "settings"
    ] == ["resume"]
    with pytest.raises(kimicode.SessionError, match="no session"):
        Agent.resume("nope", session_store=store, base_url=server.base_url, api_key="sk-test", **home_of(tmp_path))


def test_a_fork_writes_its_own_session_to_the_same_store(tmp_path: Path) -> None:
    store = MemoryStore()
    client = ScriptedClient({"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"})
    parent = Agent(client=client, session_store=store, **home_of(tmp_path))
    parent.run_sync("one")
    child = parent.fork()
    child.run_sync("two")
    assert set(store.sessions) == {parent.session_id, child.session_id}
    forked = store.sessions[child.session_id]
    assert [r["message"] for r in forked if r["type"] == "message"] == child.messages
    assert any(r.get("forked_from") == parent.session_id for r in forked)


def test_secrets_are_masked_before_the_store_sees_a_record(server: FakeServer, tmp_path: Path) -> None:
    key = "sk-live-0123456789abcdefXYZ"
    places = home_of(tmp_path)
    (places["workspace"] / "env.txt").write_text(f"KEY={key}\n")
    server.add(Reply(tool_calls=[ToolCall("read_file", {"path": "env.txt"})]), Reply(content="read"))
    store = MemoryStore()
    agent = Agent(session_store=store, base_url=server.base_url, api_key=key, **places)
    assert agent.run_sync("read env.txt").status == "success"
    text = json.dumps(store.sessions[agent.session_id])
    assert key not in text and "KEY=" in text


def test_a_store_that_refuses_ends_the_turn_with_an_error_and_a_valid_history(tmp_path: Path) -> None:
    class Full(MemoryStore):
        def append(self, session_id: str, record: dict[str, Any]) -> None:
            if record.get("type") == "message" and record["message"].get("role") == "tool":
                raise OSError("quota exceeded")
            super().append(session_id, record)

    client = ScriptedClient(call("add", {"a": 1, "b": 1}, "c1"), {"role": "assistant", "content": "never"})
    agent = Agent(client=client, session_store=Full(), tools=[add], **home_of(tmp_path))
    result = agent.run_sync("add")
    assert result.status == "error" and result.error_kind == "session_log"
    assert "quota exceeded" in str(result.error)
    assert_valid_history(agent.messages, system_first=True)


# -- wrong objects: a clear TypeError when the agent is made -------------------------------------------------


class NoClose:
    async def stream(self, messages: Any, tools: Any = (), *, max_completion_tokens: Any = None) -> Any:
        yield None


class SyncClose(NoClose):
    def aclose(self) -> None:
        pass


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"client": object()}, r"client must implement kimicode.ModelClient.*without stream or aclose"),
        ({"client": ScriptedClient}, r"the class ScriptedClient; pass an instance"),
        ({"client": NoClose()}, r"without aclose"),
        ({"client": SyncClose()}, r"client.aclose must be a coroutine function"),
        ({"client": "sk-key"}, r"kimicode.ModelClient"),
        ({"session_store": {}}, r"session_store must implement kimicode.SessionStore.*without append or load"),
        ({"session_store": MemoryStore}, r"pass an instance"),
        ({"session_store": type("Half", (), {"append": lambda self, i, r: None})()}, r"without load"),
    ],
)
def test_wrong_collaborators_are_refused_when_the_agent_is_made(
    kwargs: dict[str, Any], match: str, tmp_path: Path
) -> None:
    with pytest.raises(TypeError, match=match):
        Agent(**kwargs, **home_of(tmp_path))
    with pytest.raises(TypeError, match=match):
        Agent.resume("any", **kwargs, **home_of(tmp_path)) if "session_store" in kwargs else Agent(**kwargs)


def test_the_protocols_are_exported_and_kimicodes_own_parts_satisfy_them(tmp_path: Path) -> None:
    assert isinstance(ChatClient(ClientConfig("http://127.0.0.1:9/v1", "k", "m")), kimicode.ModelClient)
    assert isinstance(MemoryStore(), kimicode.SessionStore)
    assert isinstance(ScriptedClient(), kimicode.ModelClient)
    assert {"ModelClient", "SessionStore", "Completion", "StreamDelta", "StreamRetry", "StreamEvent"} <= set(
        kimicode.__all__
    )


# -- the parts --------------------------------------------------------------------------------------------


def test_the_agents_attributes_are_its_parts(tmp_path: Path) -> None:
    agent = Agent(api_key="sk-test", base_url="http://127.0.0.1:9/v1", **home_of(tmp_path))
    parts = agent.parts
    assert agent.context is parts.context and agent.log is parts.log and agent.policy is parts.policy
    assert agent.tools is parts.tools and agent.messages is parts.messages and agent.options is parts.options
    assert agent.endpoint is parts.resolved.endpoint and agent.session_id == parts.resolved.session_id
    assert agent.answer_reserve == parts.resolved.answer_reserve
    agent.set_model("gpt-5")
    assert parts.resolved.endpoint.model == "gpt-5" and agent.options.model == "gpt-5"
    assert agent.client.config.model == "gpt-5"  # kimicode's own client, made again for the new model


def test_build_parts_needs_no_agent(tmp_path: Path) -> None:
    """The builder is a function of the options: its parts work on their own."""
    from kimicode.agent.builder import build_parts

    parts = build_parts(kimicode.AgentOptions(api_key="sk-test", persist=False, **home_of(tmp_path)))
    assert parts.messages[0]["role"] == "system" and parts.log is None
    assert parts.policy.workspace == (tmp_path / "ws").resolve()
    assert parts.context.budget.window == parts.resolved.context_window


# -- a caller's client that breaks the protocol: the turn ends with a protocol error, the history valid -----


class Misbehaving:
    """Each request answers with one of the ways a hand-written client gets the protocol wrong."""

    def __init__(self, way: str) -> None:
        self.way = way

    def stream(self, messages: Any, tools: Any = (), *, max_completion_tokens: Any = None) -> Any:
        done = Completion({"role": "assistant", "content": "ok"}, "stop", None)
        if self.way == "list":
            return [done]  # a plain list, not an async iterator

        async def events() -> AsyncIterator[Any]:
            if self.way == "dict":
                yield {"role": "assistant", "content": "a dict, not a Completion"}
            elif self.way == "no-completion":
                yield StreamDelta("content", "and then nothing")
            elif self.way == "user-role":
                yield Completion({"role": "user", "content": "x"}, "stop", None)
            elif self.way == "not-json":
                yield Completion({"role": "assistant", "content": {1, 2}}, "stop", None)
            elif self.way == "dict-arguments":
                yield Completion(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}
                        ],
                    },
                    "tool_calls",
                    None,
                )
            elif self.way == "no-id":
                yield Completion(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": "{}"}}],
                    },
                    "tool_calls",
                    None,
                )

        return events()

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize(
    ("way", "said"),
    [
        ("list", "not an async iterator"),
        ("dict", "yielded dict"),
        ("no-completion", "ended without a Completion"),
        ("user-role", "not 'assistant'"),
        ("not-json", "not JSON"),
        ("dict-arguments", "not a JSON string"),
        ("no-id", "has no id"),
    ],
)
def test_a_client_that_breaks_the_protocol_ends_the_turn_with_a_clear_error(
    way: str, said: str, tmp_path: Path
) -> None:
    store = MemoryStore()
    agent = Agent(client=Misbehaving(way), session_store=store, tools=[add], **home_of(tmp_path))
    result = agent.run_sync("go")
    assert result.status == "error" and result.error_kind == "protocol", (result.error_kind, result.error)
    assert said in str(result.error)
    assert_valid_history(agent.messages, system_first=True)
    logged = [r["message"] for r in store.sessions[agent.session_id] if r["type"] == "message"]
    assert logged == agent.messages  # the store holds what the history holds, nothing half-made
