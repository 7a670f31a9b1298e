"""Attacks on a caller's own parts (issue 24): `Agent(client=...)` and `Agent(session_store=...)` used as a
library caller would, by mistake or on purpose. Each case names the hole it found, when it found one; the
rest pin what held. The history is checked with the one checker (`helpers.history_problems`) on every exit.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers import MemoryStore, history_problems

import kimicode
from kimicode import Agent, Completion, StreamDelta, StreamEvent, tool
from kimicode.llm.client import ChatClient, ClientConfig
from kimicode.testing import FakeServer, Reply, ToolCall

KEY_VARIABLES = ("KIMI_API_KEY", "MOONSHOT_API_KEY", "OPENAI_API_KEY", "KIMI_BASE_URL", "OPENAI_BASE_URL")
OK = {"role": "assistant", "content": "fine"}


@pytest.fixture(autouse=True)
def no_endpoint_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def places(tmp_path: Path) -> dict[str, Any]:
    ws = tmp_path / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    return {"workspace": ws, "home": tmp_path / "home"}


def problems(agent: Agent) -> list[str]:
    return history_problems(agent.messages, system_first=True, alternating=True)


class Scripted:
    """A caller's client with no server: each request takes the next answer (a message, an exception,
    or a function of the request returning the items to yield)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls = 0
        self.closes = 0

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        max_completion_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if callable(answer):
            for item in await answer(messages):
                yield item
            return
        yield Completion(
            answer,
            "tool_calls" if isinstance(answer, dict) and answer.get("tool_calls") else "stop",
            {"prompt_tokens": 10, "completion_tokens": 2},
        )

    async def aclose(self) -> None:
        self.closes += 1  # run_sync closes the agent, this client included, after each turn


def call(*ids: str | None, args: Any = '{"a": 1, "b": 2}', name: Any = "add") -> dict[str, Any]:
    calls = []
    for call_id in ids:
        c: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": args}}
        if call_id is not None:
            c["id"] = call_id
        calls.append(c)
    return {"role": "assistant", "content": None, "tool_calls": calls}


@tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


async def hang(messages: Any) -> list[Any]:
    await asyncio.Event().wait()
    return []


# -- a caller's client that misbehaves -----------------------------------------------------------------


async def _no_completion(messages: Any) -> list[Any]:
    return [StreamDelta("content", "half an answer")]


class Usage:
    prompt_tokens = 10


async def _sdk_usage(messages: Any) -> list[Any]:
    return [Completion(OK, "stop", Usage())]  # type: ignore[arg-type]


async def _garbage(messages: Any) -> list[Any]:
    return ["not an event"]


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        # hole: a call without an id was committed; its result had tool_call_id "" (a history servers refuse)
        (call(None), "tool_calls[0] has no id"),
        (call("x", "x"), "repeats the id 'x'"),
        # hole: arguments given as a dict, a message that is not a dict, tool_calls not a list, no Completion at
        # all: each was "internal error: AttributeError/AssertionError", and tool_calls="abc" escaped run_sync
        (call("x", args={"a": 1, "b": 2}), "function.arguments is a dict, not a JSON string"),
        ("just text", "Completion.message is a str"),
        ({"content": "no role"}, "its role is None"),  # hole: committed, an unknown role in the history
        ({"role": "assistant", "content": None, "tool_calls": "abc"}, "tool_calls is a str"),
        ({"role": "assistant", "content": None, "tool_calls": [{"id": "x", "type": "function"}]}, "no function name"),
        (_no_completion, "ended without a Completion"),
        # hole: the SDK's usage object passed as it is (not a dict): "internal error: AttributeError"
        (_sdk_usage, "Completion.usage as a Usage, not a dict"),
        (_garbage, "yielded str 'not an event'"),
    ],
)
def test_a_malformed_answer_from_a_callers_client_is_a_protocol_error_and_the_history_stays_valid(
    answer: Any, said: str, tmp_path: Path
) -> None:
    client = Scripted(answer, OK)
    agent = Agent(client=client, tools=[add], **places(tmp_path))
    result = agent.run_sync("go")
    assert (result.status, result.error_kind) == ("error", "protocol")
    assert said in str(result.error) and "the model client" in str(result.error)
    assert isinstance(result.error and result.error.exception(), kimicode.ProtocolError)
    assert problems(agent) == []
    assert [m["role"] for m in agent.messages] == ["system", "user"]  # nothing of the bad answer was kept
    again = agent.run_sync("again")  # the same client serves the next turn
    assert (again.status, again.result) == ("success", "fine") and problems(agent) == []


def test_arguments_that_are_not_json_are_the_models_mistake_not_the_clients(tmp_path: Path) -> None:
    agent = Agent(client=Scripted(call("c1", args="{not json"), OK), tools=[add], **places(tmp_path))
    result = agent.run_sync("go")
    assert result.status == "success" and problems(agent) == []
    assert "Invalid arguments for add" in agent.messages[3]["content"]


@pytest.mark.parametrize(
    ("error", "kind", "cls"),
    [
        (kimicode.ModelError("slow down", "transient", 429, 7.0), "transient", kimicode.RateLimitError),
        (kimicode.AuthError("bad key", "auth", 401), "auth", kimicode.AuthError),
        (kimicode.ModelError("too long", "context_length"), "context_length", kimicode.ContextLengthError),
        (kimicode.ModelError("nonsense", "bad_request", 400), "bad_request", kimicode.BadRequestError),
    ],
)
def test_a_model_error_raised_by_a_callers_client_keeps_its_kind_and_is_not_retried_again(
    error: kimicode.ModelError, kind: str, cls: type[Exception], tmp_path: Path
) -> None:
    """hole: the documented way for a client to fail (`raise kimicode.ModelError`) ended the turn as an
    "internal error" (only kimicode's own LLMError was caught), its kind, status and retry-after lost."""
    client = Scripted(error, OK)
    agent = Agent(client=client, **places(tmp_path))
    result = agent.run_sync("go")
    assert (result.status, result.error_kind) == ("error", kind) and str(result.error) == error.message
    assert result.error is not None and (result.error.status, result.error.retry_after) == (
        error.status,
        error.retry_after,
    )
    with pytest.raises(cls):
        result.raise_for_status()
    assert client.calls == 1  # the client's own retries are the only ones: the agent adds none
    assert problems(agent) == []


def test_a_callers_client_wrapping_kimicodes_is_retried_by_one_layer_only(server: FakeServer, tmp_path: Path) -> None:
    server.add(*(server.error("server") for _ in range(6)))
    inner = ChatClient(
        ClientConfig(
            base_url=server.base_url,
            api_key="sk-own",
            model="kimi-k3",
            max_retries=2,
            retries_explicit=True,
            retry_base_delay=0.01,
        )
    )
    wrapper = Recording(inner)
    agent = Agent(client=wrapper, max_retries=5, **places(tmp_path))  # the agent's setting is not the client's
    result = agent.run_sync("go")
    assert (result.status, result.error_kind) == ("error", "transient")
    assert wrapper.requests == 1 and len(server.requests) == 3  # 1 + the client's 2 retries; not 6, not 18


class Recording:
    """A caller's client that wraps kimicode's own one (the documented way to record requests)."""

    def __init__(self, inner: ChatClient) -> None:
        self.inner = inner
        self.requests = 0
        self.closes = 0

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
        self.closes += 1
        await self.inner.aclose()


def test_subagents_and_forks_do_not_close_the_callers_client_under_its_agent(
    server: FakeServer, tmp_path: Path
) -> None:
    """hole: a subagent's `aclose()` at the end of its task closed the caller's client, so the parent's very
    next request failed ("internal error: RuntimeError"); a fork's `aclose()` did the same to its parent."""
    server.add(
        Reply(tool_calls=[ToolCall("task", {"description": "look", "prompt": "list the files"})]),
        Reply(content="the subagent's answer"),
        Reply(content="the parent goes on"),
        Reply(content="forked"),
        Reply(content="the parent still works"),
    )
    client = Recording(
        ChatClient(ClientConfig(base_url=server.base_url, api_key="sk-own", model="kimi-k3", retry_base_delay=0.01))
    )
    parent = Agent(client=client, **places(tmp_path))

    async def main() -> list[Any]:
        try:
            first = await parent.run("delegate")
            child = parent.fork()
            forked = await child.run("in the fork")
            await child.aclose()
            return [first, forked, await parent.run("and the parent")]
        finally:
            await parent.aclose()

    first, forked, last = asyncio.run(main())
    assert (first.status, first.result) == ("success", "the parent goes on")
    assert (forked.status, last.status, last.result) == ("success", "success", "the parent still works")
    assert client.closes == 1  # by the agent it was given to, once
    assert problems(parent) == []


def test_a_client_that_never_answers_is_stopped_by_a_timeout_and_by_interrupt(tmp_path: Path) -> None:
    client = Scripted(hang, hang, OK)
    agent = Agent(client=client, **places(tmp_path))

    async def main() -> tuple[Any, Any]:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(agent.run("first"), 0.2)
        asyncio.get_running_loop().call_later(0.2, agent.interrupt)
        stopped = await agent.run("second")
        return stopped, await agent.run("third")

    stopped, third = asyncio.run(main())
    assert stopped.status == "interrupted"
    assert (third.status, third.result) == ("success", "fine")
    assert problems(agent) == []


def test_one_client_shared_by_two_agents_at_once_answers_each_its_own(server: FakeServer, tmp_path: Path) -> None:
    def route(request: Any) -> Reply:
        prompt = request.body["messages"][-1]["content"]
        return Reply(content=f"answer to {prompt}")

    server.add(*(route for _ in range(4)))
    client = Recording(ChatClient(ClientConfig(base_url=server.base_url, api_key="sk-own", model="kimi-k3")))
    a = Agent(client=client, **places(tmp_path / "a"))
    b = Agent(client=client, **places(tmp_path / "b"))

    async def sequential() -> list[Any]:
        try:
            results = []
            for i in range(2):
                results += await asyncio.gather(a.run(f"a{i}"), b.run(f"b{i}"))
            return results
        finally:
            await a.aclose()
            await b.aclose()

    results = asyncio.run(sequential())
    assert [r.result for r in results][-4:] == ["answer to a0", "answer to b0", "answer to a1", "answer to b1"]
    assert [m["content"] for m in a.messages if m["role"] == "user"][-2:] == ["a0", "a1"]
    assert problems(a) == [] and problems(b) == []


class CoroutineStream:
    async def stream(self, messages: Any, tools: Any = (), *, max_completion_tokens: Any = None) -> list[Any]:
        return [Completion(OK, "stop", None)]

    async def aclose(self) -> None:
        pass


class ListStream:
    def stream(self, messages: Any, tools: Any = (), *, max_completion_tokens: Any = None) -> list[Any]:
        return [Completion(OK, "stop", None)]

    async def aclose(self) -> None:
        pass


def test_an_async_def_stream_without_yield_is_refused_when_the_agent_is_made(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"client\.stream must be an async generator"):
        Agent(client=CoroutineStream(), **places(tmp_path))


def test_a_sync_stream_returning_a_list_ends_the_turn_with_a_clear_error(tmp_path: Path) -> None:
    agent = Agent(client=ListStream(), **places(tmp_path))
    result = agent.run_sync("go")
    assert (result.status, result.error_kind) == ("error", "protocol")
    assert "returned list from stream(), not an async iterator" in str(result.error)
    assert problems(agent) == []


# -- a caller's session store that misbehaves ---------------------------------------------------------------


def _tool_result(record: dict[str, Any]) -> bool:
    return record.get("type") == "message" and record["message"].get("role") == "tool"


@pytest.mark.parametrize("error", [OSError, sqlite3.OperationalError, RuntimeError])
@pytest.mark.parametrize(
    ("where", "fails"),
    [
        ("a tool result", _tool_result),
        ("the first record", lambda record: record.get("type") == "meta"),
        ("the turn's end", lambda record: record.get("type") == "turn_end"),
    ],
)
def test_a_store_that_fails_with_any_exception_ends_the_turn_with_a_valid_history(
    where: str, fails: Callable[[dict[str, Any]], bool], error: type[Exception], tmp_path: Path
) -> None:
    """hole: a store raising anything but OSError (sqlite3's "database is locked", a driver's own error) at
    a tool result left that call without a result: an "internal error", and the next turn sent a history
    a server refuses (a user message before the call's result)."""
    agent = Agent(
        client=Scripted(call("c1"), OK, OK), session_store=MemoryStore(fails, error), tools=[add], **places(tmp_path)
    )
    result = agent.run_sync("go")
    assert (result.status, result.error_kind) == ("error", "session_log"), where
    assert "the session store could not keep a record" in str(result.error)
    assert problems(agent) == []
    assert agent.run_sync("again").status == "success" and problems(agent) == []


@pytest.mark.parametrize("turn", ["model error", "interrupted"])
def test_a_store_failing_at_the_turns_end_never_makes_run_raise(turn: str, tmp_path: Path) -> None:
    """hole: when the turn already ended on a model error or an interrupt, a store (or a full disk) refusing
    its `turn_end` record raised SessionWriteError out of run() itself, instead of a RunResult."""
    first = kimicode.ModelError("refused", "bad_request", 400) if turn == "model error" else hang
    agent = Agent(
        client=Scripted(first), session_store=MemoryStore(lambda r: r.get("type") == "turn_end"), **places(tmp_path)
    )

    async def main() -> Any:
        asyncio.get_running_loop().call_later(0.2, agent.interrupt)
        return await agent.run("go")

    result = asyncio.run(main())
    assert result.status == ("error" if turn == "model error" else "interrupted")
    assert result.error_kind == ("bad_request" if turn == "model error" else None)  # the turn's own failure
    assert problems(agent) == []


@pytest.mark.parametrize(
    ("records", "said"),
    [
        ({"type": "meta"}, "a dict: load() returns the list of records"),
        ("meta", "a str: load() returns"),
        ([{"type": "meta"}, "a line of text"], "a str as record 1"),
        ([{"type": "message", "message": {"role": "system", "content": "s"}}, 7], "a int as record 1"),
        ([{"type": "message", "message": {"content": "no role"}}], "do not make a valid history"),
        (
            [
                {"type": "message", "message": {"role": "user", "content": "u"}},
                {"type": "message", "message": {"role": "assistant", "tool_calls": "zz"}},
            ],
            "tool_calls that are not a list",
        ),
        (
            [
                {"type": "message", "message": {"role": "system", "content": "s"}},
                {"type": "message", "message": {"role": "assistant", "tool_calls": [7]}},
            ],
            "tool_calls that are not a list",
        ),
    ],
)
def test_garbage_read_back_from_a_store_is_a_session_error_naming_the_store(
    records: Any, said: str, tmp_path: Path
) -> None:
    """hole: each of these raised AttributeError from deep inside the replay (`'str' object has no
    attribute 'get'`); a caller gets a SessionError saying which store returned what."""

    class Garbage(MemoryStore):
        def load(self, session_id: str) -> Any:
            return records

    with pytest.raises(kimicode.SessionError, match="the session store Garbage returned") as caught:
        Agent.resume("s1", session_store=Garbage(), client=Scripted(OK), **places(tmp_path))
    assert said in str(caught.value)


def test_a_resumed_history_is_the_agents_own_not_the_stores_records(tmp_path: Path) -> None:
    store = MemoryStore()
    first = Agent(client=Scripted(OK), session_store=store, **places(tmp_path))
    first.run_sync("remember 7")
    later = Agent.resume(first.session_id, session_store=store, client=Scripted(OK), **places(tmp_path))
    before = copy.deepcopy(later.messages)
    for record in store.sessions[first.session_id]:  # a store that reuses (or edits) what it returned
        if record["type"] == "message":
            record["message"]["content"] = "changed in the store"
    assert later.messages == before
    later.messages[1]["content"] = "changed by the agent"
    assert store.sessions[first.session_id][2]["message"]["content"] == "changed in the store"


def test_two_agents_cannot_write_one_session_of_a_store_at_once(tmp_path: Path) -> None:
    """hole: the session lock was the file store's only, so two agents of this process resuming the same
    session of one store both appended to it, interleaving two conversations into one history."""
    store = MemoryStore()
    first = Agent(client=Scripted(OK), session_store=store, **places(tmp_path))
    first.run_sync("one")
    holder = Agent.resume(first.session_id, session_store=store, client=Scripted(OK, OK), **places(tmp_path))
    with pytest.raises(kimicode.SessionError, match="in use by another agent in this process"):
        Agent.resume(first.session_id, session_store=store, client=Scripted(OK), **places(tmp_path))
    copy_ = Agent.resume(first.session_id, fork=True, session_store=store, client=Scripted(OK), **places(tmp_path))
    assert copy_.run_sync("in the copy").status == "success"  # a fork is a new session: allowed
    assert holder.run_sync("two").status == "success"  # run_sync closes it: the session is free again
    again = Agent.resume(first.session_id, session_store=store, client=Scripted(OK), **places(tmp_path))
    assert again.run_sync("three").status == "success"
    users = [
        r["message"]["content"]
        for r in store.sessions[first.session_id]
        if r["type"] == "message" and r["message"]["role"] == "user"
    ]
    assert users == ["one", "two", "three"]
    other = MemoryStore()  # another store's session of the same id is another session
    other.sessions[first.session_id] = copy.deepcopy(store.sessions[first.session_id])
    both = [
        Agent.resume(first.session_id, session_store=s, client=Scripted(OK), **places(tmp_path)) for s in (store, other)
    ]
    assert all(a.log is not None and a.log.lock is not None for a in both)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


def test_a_secret_with_json_escaped_characters_never_reaches_a_store_or_the_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """hole: records were masked as JSON text, where a secret holding `"` or `\\` is escaped and so not
    found: the model echoing such a password (answer and reasoning) put it in every store and log unmasked."""
    secret = 'pa"ss\\w0rd-4242-correct-horse'
    monkeypatch.setenv("DB_PASSWORD", secret)
    echo = {"role": "assistant", "content": f"the password is {secret}", "reasoning_content": f"it is {secret}"}
    store = MemoryStore()
    agent = Agent(client=Scripted(echo), session_store=store, **places(tmp_path))
    assert agent.run_sync("what is it?").status == "success"
    assert agent.messages[-1]["content"].endswith(secret)  # the history sent back is the model's own text
    stored = _strings(store.sessions[agent.session_id])
    assert not [s for s in stored if secret in s] and any("the password is ***" in s for s in stored)
    on_disk = Agent(client=Scripted(echo), **places(tmp_path / "file"))
    on_disk.run_sync("what is it?")
    assert on_disk.log is not None
    logged = [json.loads(line) for line in on_disk.log.path.read_text().splitlines()]
    assert not [s for s in _strings(logged) if secret in s]


def test_every_message_record_is_the_wire_object_reasoning_byte_for_byte(server: FakeServer, tmp_path: Path) -> None:
    thought = '  first, look\n\tthen — add (ünïcode, "quotes", \\ and trailing space) '
    server.add(
        Reply(reasoning=thought, tool_calls=[ToolCall("add", {"a": 1, "b": 2})]),
        Reply(reasoning="", content="3"),  # an empty reasoning is kept, as the server sent it
        Reply(content="no reasoning field at all"),
    )
    store = MemoryStore()
    agent = Agent(session_store=store, tools=[add], base_url=server.base_url, api_key="sk-test", **places(tmp_path))
    assert agent.run_sync("add").status == "success"
    assert agent.run_sync("again").status == "success"
    recorded = [r["message"] for r in store.sessions[agent.session_id] if r["type"] == "message"]
    assert recorded == agent.messages
    for request in server.requests:  # what went over the wire is the records' prefix, byte for byte as JSON
        sent = request.body["messages"]
        assert json.dumps(sent, ensure_ascii=False) == json.dumps(recorded[: len(sent)], ensure_ascii=False)
    assistants = [m for m in recorded if m["role"] == "assistant"]
    assert assistants[0]["reasoning_content"] == thought
    assert "reasoning_content" in assistants[1] and assistants[1]["reasoning_content"] == ""
    assert "reasoning_content" in assistants[2]
    assert problems(agent) == []


class Adapter:
    """A caller's client translating to another API in place: it takes the system prompt out, drops the
    reasoning and renames each tool's `parameters` (what an Anthropic adapter written in a hurry does)."""

    def __init__(self) -> None:
        self.received: list[list[str]] = []

    async def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] = [],  # noqa: B006
        *,
        max_completion_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        self.received.append([m["role"] for m in messages])
        if messages and messages[0]["role"] == "system":
            messages.pop(0)
        for message in messages:
            message.pop("reasoning_content", None)
        for schema in tools:
            schema["function"]["input_schema"] = schema["function"].pop("parameters", None)
            for prop in (schema["function"]["input_schema"] or {}).get("properties", {}).values():
                prop.pop("description", None)  # nested: these dicts were the tools' own
        yield Completion({"role": "assistant", "content": "ok", "reasoning_content": "because"}, "stop", None)

    async def aclose(self) -> None:
        pass


def test_a_client_that_changes_what_it_is_given_changes_neither_the_history_nor_any_tool(tmp_path: Path) -> None:
    """hole: the client was handed the agent's own history list and the tools' schemas: an adapter popping the
    system prompt and the reasoning from them took both out of the history (the next request, and the
    history a resume would replay, differed), and renaming a schema's key in place would change the
    built-in tools of every agent in the process."""
    client = Adapter()
    agent = Agent(client=client, **places(tmp_path))
    other = Agent(client=Scripted(OK), **places(tmp_path / "other"))
    schemas = copy.deepcopy(other.tools.schemas())
    assert any(
        "description" in p for s in schemas for p in s["function"].get("parameters", {}).get("properties", {}).values()
    )

    async def main() -> None:
        await agent.run("one")
        await agent.run("two")

    asyncio.run(main())
    assert client.received == [["system", "user"], ["system", "user", "assistant", "user"]]
    assert problems(agent) == []
    assert [m.get("reasoning_content") for m in agent.messages if m["role"] == "assistant"] == ["because"] * 2
    assert other.tools.schemas() == schemas == agent.tools.schemas()  # the built-in tools are every agent's


def _shaped(kind: str, **methods: Any) -> Any:
    base: dict[str, Any] = {"aclose": Scripted.aclose} if kind == "client" else {"load": MemoryStore.load}
    return type(f"My{kind.title()}", (), {**base, **methods})()


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        # hole: each passed the construction check (the methods exist) and failed at the first request or record
        ({"client": "agent"}, "client.stream cannot be called as the agent calls it"),  # another Agent as a client
        ({"client": _shaped("client", stream=lambda self, messages: None)}, "too many positional arguments"),
        (
            {"client": _shaped("client", stream=lambda self, messages, tools, max_tokens=None: None)},
            "unexpected keyword argument 'max_completion_tokens'",
        ),
        (
            {"session_store": _shaped("store", append=lambda self, record: None)},
            "session_store.append cannot be called",
        ),
        ({"session_store": _shaped("store", append=MemoryStore.append, load=lambda self: [])}, "session_store.load"),
    ],
)
def test_a_collaborator_that_cannot_be_called_as_the_agent_calls_it_is_refused_when_made(
    kwargs: dict[str, Any], said: str, tmp_path: Path
) -> None:
    if kwargs.get("client") == "agent":
        kwargs = {"client": Agent(client=Scripted(), **places(tmp_path / "inner"))}
    with pytest.raises(TypeError, match=re.escape(said)):
        Agent(**kwargs, **places(tmp_path))


def test_a_client_taking_anything_is_accepted(tmp_path: Path) -> None:
    class Loose(Scripted):
        def stream(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            return Scripted.stream(self, *args, **kwargs)

    assert Agent(client=Loose(OK), **places(tmp_path)).run_sync("hi").result == "fine"
