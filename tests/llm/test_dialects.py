"""kimicode through every server dialect: a plain answer, a tool round trip that sends reasoning and ids
back byte for byte, usage and cached tokens, error classification, and a long session in a 4k window
that must prune and compact under each server's own context-length error.

The servers are `kimicode.testing.FakeServer` dialects (see docs/servers.md for their sources).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_valid_history, produce
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kimicode import Agent
from kimicode.events import Event, Notice
from kimicode.llm.client import ChatClient, ClientConfig, LLMError
from kimicode.llm.overflow import context_overflow
from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall, get_dialect

DIALECTS = [
    "moonshot",
    "openai",
    "vllm",
    "sglang",
    "llamacpp",
    "ollama",
    "ollama-refuses",
    "openrouter",
    "deepseek",
    "litellm",
]
REFUSING = [d for d in DIALECTS if not get_dialect(d).truncates]
REASONING = 'Let me look.\n  Indented — ünïcode ✓, a "quote", a tab\tand trailing space '


def agent_for(server: FakeServer, workspace: Path, home: Path, **kwargs: Any) -> Agent:
    opts: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "sk-test",
        "model": "test-model",
        "workspace": workspace,
        "home": home,
        "system_prompt": "You are a test agent.",
        "project_instructions": False,
        "retry_base_delay": 0.01,
        "permission_mode": "yolo",
    }
    opts.update(kwargs)
    return Agent(**opts)


@pytest.mark.parametrize("name", DIALECTS)
def test_plain_answer(name: str, workspace: Path, tmp_path: Path) -> None:
    with FakeServer([Reply(content="Paris.", reasoning="easy")], dialect=name) as server:
        result = agent_for(server, workspace, tmp_path / "home").run_sync("capital of France?")
    assert result.status == "success", result.error
    assert result.result == "Paris."


@pytest.mark.parametrize("name", DIALECTS)
def test_tool_round_trip_sends_reasoning_and_ids_back_exactly(name: str, workspace: Path, tmp_path: Path) -> None:
    dialect = get_dialect(name)
    (workspace / "a.txt").write_text("alpha\n")
    script = [
        Reply(reasoning=REASONING, content="", tool_calls=[ToolCall("read_file", {"path": "a.txt"})], cached_tokens=7),
        Reply(content="It says alpha.", cached_tokens=11),
    ]
    with FakeServer(script, dialect=name) as server:
        agent = agent_for(server, workspace, tmp_path / "home")
        result = agent.run_sync("read a.txt")
        requests = list(server.requests)
        sent_id = server.tool_call_ids[0]
    assert result.status == "success", result.error
    assert result.result == "It says alpha."
    history = requests[1].body["messages"]
    assistant = next(m for m in history if m["role"] == "assistant")
    tool_msg = next(m for m in history if m["role"] == "tool")
    assert assistant["tool_calls"][0]["id"] == sent_id == tool_msg["tool_call_id"]
    assert assistant["tool_calls"][0]["function"] == {"name": "read_file", "arguments": '{"path": "a.txt"}'}
    assert "alpha" in tool_msg["content"]
    if dialect.reasoning_field is None:  # OpenAI sends no reasoning text: none is invented
        assert "reasoning_content" not in assistant and "reasoning" not in assistant
    else:
        assert assistant[dialect.reasoning_field] == REASONING  # byte for byte, under the server's name
        other = "reasoning" if dialect.reasoning_field == "reasoning_content" else "reasoning_content"
        assert other not in assistant
    # usage and cached tokens, each counted once whichever place the server put them in
    prompts = [len(r.raw) // 4 for r in requests]
    assert agent.usage["prompt_tokens"] == sum(prompts)
    assert agent.usage["cached_tokens"] == (0 if dialect.cached == "none" else 7 + 11)
    assert agent.usage["completion_tokens"] > 0


ERROR_KINDS = {"auth": "auth", "rate_limit": "transient", "overloaded": "transient", "server": "transient"}


async def _fail(server: FakeServer) -> LLMError:
    client = ChatClient(ClientConfig(base_url=server.base_url, api_key="sk-test", model="test-model", max_retries=0))
    try:
        async for _ in client.stream([{"role": "user", "content": "hi"}]):
            pass
    except LLMError as err:
        return err
    finally:
        await client.aclose()
    raise AssertionError("the request did not fail")


@pytest.mark.parametrize("name", DIALECTS)
def test_errors_are_classified(name: str) -> None:
    with FakeServer(dialect=name) as server:
        for kind, expected in ERROR_KINDS.items():
            server.add(server.error(kind))  # type: ignore[arg-type]
            err = asyncio.run(_fail(server))
            assert err.kind == expected, (kind, err)
            assert err.status == server.error(kind).status  # type: ignore[arg-type]


@pytest.mark.parametrize("name", REFUSING)
def test_context_errors_are_recognised_with_their_window(name: str) -> None:
    with FakeServer(dialect=name, context_window=1000) as server:
        server.add(Reply(content="never"))

        async def overflow() -> LLMError:
            client = ChatClient(
                ClientConfig(base_url=server.base_url, api_key="k", model="m", max_retries=0, max_completion_tokens=100)
            )
            try:
                async for _ in client.stream([{"role": "user", "content": "z" * 6000}]):
                    pass
            except LLMError as err:
                return err
            finally:
                await client.aclose()
            raise AssertionError("not refused")

        err = asyncio.run(overflow())
        refused = server.requests[0]
    assert err.kind == "context_length", err
    found = context_overflow(err.status, err.message, err.error_type)
    assert found is not None and found.window == 1000, (found, err.message)
    prompt = len(refused.raw) // 4
    assert found.prompt_estimate(100) in (prompt, None)


class Script:
    """Main requests get tool calls, then a final answer; summary requests (no tools) get a summary."""

    def __init__(self, server: FakeServer, calls: int, lines: int) -> None:
        self.left = calls
        self.lines = lines
        self.accepted: list[RecordedRequest] = []
        server.add(*[self] * 300)

    def __call__(self, req: RecordedRequest) -> Reply:
        self.accepted.append(req)
        if "tools" not in req.body:
            return Reply(content="## Goal\nRead the generated files.\n## Next step\nContinue reading.")
        if self.left <= 0:
            return Reply(content="all read")
        self.left -= 1
        return Reply(reasoning="next file", tool_calls=[ToolCall("produce", {"n": self.lines, "seed": self.left})])


@pytest.mark.parametrize("name", REFUSING)
def test_long_session_in_a_4k_window_prunes_and_compacts_under_each_servers_error(
    name: str, workspace: Path, tmp_path: Path
) -> None:
    """The agent believes 32k; the server has 4k and says so only in its own context error."""
    window = 4096
    with FakeServer(dialect=name, context_window=window) as server:
        script = Script(server, calls=14, lines=30)
        events: list[Event] = []
        agent = agent_for(
            server,
            workspace,
            tmp_path / "home",
            tools=[produce],
            context_window=32_768,
            on_event=events.append,
            max_turns=200,
        )
        result = agent.run_sync("read the generated files one by one")
        refused = len(server.requests) - len(script.accepted)
    assert result.status == "success", (name, result.error)
    assert result.result == "all read"
    assert 1 <= refused <= 3, refused  # the error taught the window; no refusal loop
    assert agent.context.budget.window <= window
    texts = [e.text for e in events if isinstance(e, Notice)]
    assert any("pruned" in t or "compacted" in t for t in texts), texts
    dialect = get_dialect(name)
    for req in script.accepted[-5:]:  # once learnt, every request fits the server's own rule
        completion = req.body.get("max_completion_tokens", 0) if dialect.counts_completion else 0
        assert len(req.raw) // 4 + completion <= window


def test_ollama_truncates_silently_so_the_window_must_be_given(workspace: Path, tmp_path: Path) -> None:
    """Ollama never refuses (it drops the prompt's start): with --context-window the session still fits."""
    window = 4096
    with FakeServer(dialect="ollama", context_window=window) as server:
        script = Script(server, calls=14, lines=30)
        agent = agent_for(server, workspace, tmp_path / "home", tools=[produce], context_window=window, max_turns=200)
        result = agent.run_sync("read the generated files one by one")
    assert result.status == "success", result.error
    assert len(server.requests) == len(script.accepted)  # nothing was refused...
    for req in script.accepted:  # ...and nothing was silently cut: every request fitted
        assert len(req.raw) // 4 + req.body["max_completion_tokens"] <= window


@pytest.mark.parametrize(
    ("name", "source"),
    [("vllm", "server"), ("sglang", "server"), ("llamacpp", "server"), ("openrouter", "server"), ("ollama", "default")],
)
def test_window_discovery_where_the_server_says_it(name: str, source: str, workspace: Path, tmp_path: Path) -> None:
    """vLLM/SGLang `max_model_len`, llama.cpp `/props`, OpenRouter `context_length`; Ollama says nothing."""
    with FakeServer([Reply(content="ok")], dialect=name, context_window=16_384, model="test-model") as server:
        agent = agent_for(server, workspace, tmp_path / "home")
        assert agent.run_sync("hi").status == "success"
    assert agent.window_source == source
    assert (agent.context.budget.window == 16_384) is (source == "server")


def test_a_server_sending_empty_tool_call_ids_still_pairs_results(workspace: Path, tmp_path: Path) -> None:
    """Hostile: a gateway that blanks ids (``"id": ""``) on two steps in a row."""
    import dataclasses

    blank = dataclasses.replace(get_dialect("ollama"), name="blank-ids", tool_id=lambda name, n: "")
    (workspace / "a.txt").write_text("alpha\n")
    script = [
        Reply(tool_calls=[ToolCall("read_file", {"path": "a.txt"}), ToolCall("glob", {"pattern": "*.txt"})]),
        Reply(tool_calls=[ToolCall("read_file", {"path": "a.txt"})]),
        Reply(content="ok"),
    ]
    with FakeServer(script, dialect=blank) as server:
        result = agent_for(server, workspace, tmp_path / "home").run_sync("go")
        history = server.requests[-1].body["messages"]
    assert result.status == "success", result.error
    assert server.tool_call_ids == ["", "", ""]
    assert_valid_history(history)  # every call got an id of its own, and its result names it


@pytest.mark.prepush
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(DIALECTS),
    reasoning=st.text(max_size=30),
    content=st.text(max_size=30),
    args=st.lists(st.dictionaries(st.text(max_size=5), st.text(max_size=8), max_size=2), max_size=3),
    chunk=st.integers(min_value=1, max_value=9),
)
def test_any_reply_in_any_dialect_assembles_exactly(
    name: str, reasoning: str, content: str, args: list[dict[str, str]], chunk: int
) -> None:
    """Whatever the text (unicode, empty, JSON-hostile) and however it is cut, the client rebuilds it."""
    dialect = get_dialect(name)
    calls = [ToolCall(f"tool_{i}", a) for i, a in enumerate(args)]
    reply = Reply(reasoning=reasoning or None, content=content, tool_calls=calls, chunk_size=chunk)

    async def run(server: FakeServer) -> Any:
        client = ChatClient(ClientConfig(base_url=server.base_url, api_key="k", model="test-model", max_retries=0))
        try:
            async for event in client.stream([{"role": "user", "content": "hi"}]):
                last = event
        finally:
            await client.aclose()
        return last

    with FakeServer([reply], dialect=name) as server:
        done = asyncio.run(run(server))
        ids = list(server.tool_call_ids)
    assert done.message["content"] == content
    if dialect.reasoning_field is not None and reasoning:
        assert done.message[dialect.reasoning_field] == reasoning
    got = [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in done.message.get("tool_calls", [])]
    assert got == [(i, c.name, c.arguments_text()) for i, c in zip(ids, calls, strict=True)]
    assert done.usage is not None and done.usage["prompt_tokens"] > 0
