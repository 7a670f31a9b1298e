"""The model client against the fake server: accumulation, history round-trip, request shape, retries."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from helpers import split_at
from hypothesis import given, settings
from hypothesis import strategies as st

from kimicode.llm.accumulate import StreamAccumulator, usage_numbers
from kimicode.llm.client import ChatClient, ClientConfig, Completion, StreamDelta, StreamRetry
from kimicode.llm.errors import LLMError, classify_status, parse_retry_after
from kimicode.testing import ErrorReply, FakeServer, Reply, ToolCall

MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]


def make_client(server: FakeServer, **kwargs: Any) -> ChatClient:
    cfg: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "sk-test",
        "model": "kimi-k3",
        "session_id": "sess-1",
        "retry_base_delay": 0.01,
    }
    cfg.update(kwargs)
    return ChatClient(ClientConfig(**cfg))


async def collect(client: ChatClient, messages: list[dict[str, Any]]) -> tuple[list[Any], Completion]:
    events = [ev async for ev in client.stream(messages, [])]
    assert isinstance(events[-1], Completion)
    return events, events[-1]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- accumulation ---------------------------------------------------------------------------------


def test_accumulator_assembles_tool_calls_by_index_and_keeps_ids() -> None:
    acc = StreamAccumulator()
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "think "}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "more"}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "functions.bash:3",
                                "type": "function",
                                "function": {"name": "bash", "arguments": ""},
                            }
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 1,
                                "id": "functions.read_file:4",
                                "type": "function",
                                "function": {"name": "read_file", "arguments": ""},
                            }
                        ]
                    },
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"comm'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'and":"ls"}'}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4, "cached_tokens": 6}},
    ]
    for c in chunks:
        acc.add(c)
    msg = acc.message()
    assert msg == {
        "role": "assistant",
        "reasoning_content": "think more",
        "content": "",
        "tool_calls": [
            {
                "id": "functions.bash:3",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command":"ls"}'},
            },
            {"id": "functions.read_file:4", "type": "function", "function": {"name": "read_file", "arguments": ""}},
        ],
    }
    assert acc.finish_reason == "tool_calls"
    assert usage_numbers(acc.usage) == (10, 4, 6)


def test_accumulator_tolerates_usage_chunks_without_choices_and_legacy_usage() -> None:
    acc = StreamAccumulator()
    acc.add({"choices": None, "usage": None})
    acc.add({"usage": {"prompt_tokens": 1}})
    acc.add({"choices": [{"index": 0, "delta": {"reasoning": "r"}}]})
    acc.add(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {},
                    "finish_reason": "stop",
                    "usage": {
                        "prompt_tokens": 7,
                        "completion_tokens": 2,
                        "prompt_tokens_details": {"cached_tokens": 5},
                    },
                }
            ]
        }
    )
    assert acc.reasoning_field == "reasoning"
    assert acc.message() == {"role": "assistant", "reasoning": "r", "content": ""}
    assert usage_numbers(acc.usage) == (7, 2, 5)


@pytest.mark.prepush
@settings(max_examples=150, deadline=None)
@given(
    reasoning=st.text(max_size=40),
    content=st.text(max_size=40),
    args=st.lists(st.text(max_size=30), max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=80), max_size=8),
    field=st.sampled_from(["reasoning_content", "reasoning"]),
)
def test_any_split_of_a_stream_gives_the_same_message(
    reasoning: str, content: str, args: list[str], cuts: list[int], field: str
) -> None:
    """Property: however the server fragments the text, the assembled message is identical."""
    chunks: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"role": "assistant", field: ""}}]}]
    for piece in split_at(reasoning, cuts):
        chunks.append({"choices": [{"index": 0, "delta": {field: piece}}]})
    for piece in split_at(content, cuts):
        chunks.append({"choices": [{"index": 0, "delta": {"content": piece}}]})
    for i, arg in enumerate(args):
        chunks.append(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": i,
                                    "id": f"functions.t:{i}",
                                    "type": "function",
                                    "function": {"name": "t", "arguments": ""},
                                }
                            ]
                        },
                    }
                ]
            }
        )
        for piece in split_at(arg, cuts):
            chunks.append(
                {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, "function": {"arguments": piece}}]}}]}
            )
    acc = StreamAccumulator()
    for c in chunks:
        acc.add(c)
    msg = acc.message()
    assert msg[field] == reasoning
    assert msg["content"] == content
    assert [tc["function"]["arguments"] for tc in msg.get("tool_calls", [])] == args
    assert [tc["id"] for tc in msg.get("tool_calls", [])] == [f"functions.t:{i}" for i in range(len(args))]


# -- the wire -------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_and_tool_calls_round_trip_byte_for_byte(field: str) -> None:
    with FakeServer(
        [
            Reply(
                reasoning="I should list files.",
                reasoning_field=field,
                tool_calls=[ToolCall("bash", {"command": "ls -la"})],
                chunk_size=3,
            ),
            Reply(reasoning="", reasoning_field=field, content="done"),
        ]
    ) as server:
        client = make_client(server)

        async def go() -> None:
            _, first = await collect(client, MESSAGES)
            msg = first.message
            assert msg[field] == "I should list files."
            assert msg["tool_calls"][0]["id"] == "functions.bash:0"
            history = [*MESSAGES, msg, {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": "x"}]
            _, second = await collect(client, history)
            assert second.message[field] == ""  # empty reasoning is kept, not dropped
            await client.aclose()

        run(go())
        sent = server.requests[1]
        assert sent.body["messages"][2] == sent.body["messages"][2] | {field: "I should list files."}
        first_msg = sent.body["messages"][2]
        # the exact object the first response produced, under the server's own field name
        assert first_msg == {
            "role": "assistant",
            field: "I should list files.",
            "content": "",
            "tool_calls": [
                {
                    "id": "functions.bash:0",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls -la"}'},
                }
            ],
        }
        encoded = json.dumps(first_msg, ensure_ascii=False, separators=(",", ":")).encode()
        assert encoded in sent.raw


def test_request_shape_for_kimi_k3() -> None:
    with FakeServer([Reply(content="ok")]) as server:
        client = make_client(server, effort="max")
        run(collect(client, MESSAGES))
        body = server.requests[0].body
        assert body["model"] == "kimi-k3"
        assert body["reasoning_effort"] == "max"
        assert body["prompt_cache_key"] == "sess-1"
        assert body["max_completion_tokens"] == 32768
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert "temperature" not in body and "thinking" not in body
        assert server.requests[0].headers["authorization"] == "Bearer sk-test"


def test_request_shape_for_kimi_k2_and_generic() -> None:
    with FakeServer([Reply(content="ok"), Reply(content="ok"), Reply(content="ok")]) as server:
        run(collect(make_client(server, model="kimi-k2-thinking"), MESSAGES))
        run(collect(make_client(server, model="gpt-5"), MESSAGES))
        run(collect(make_client(server, model="gpt-5", effort="low", max_completion_tokens=1000), MESSAGES))
        k2, generic, generic_effort = (r.body for r in server.requests)
        assert k2["thinking"] == {"type": "enabled", "keep": "all"}
        assert "reasoning_effort" not in generic and "thinking" not in generic
        assert generic_effort["reasoning_effort"] == "low"
        assert generic_effort["max_completion_tokens"] == 1000


def test_generic_server_without_reasoning_gets_no_reasoning_field() -> None:
    with FakeServer([Reply(content="plain")]) as server:
        _, done = run(collect(make_client(server, model="gpt-5"), MESSAGES))
        assert done.message == {"role": "assistant", "content": "plain"}


def test_deltas_stream_in_order() -> None:
    with FakeServer([Reply(reasoning="abcdef", content="xyz", chunk_size=2)]) as server:
        events, _ = run(collect(make_client(server), MESSAGES))
        deltas = [(e.kind, e.text) for e in events if isinstance(e, StreamDelta)]
        assert deltas == [
            ("reasoning", "ab"),
            ("reasoning", "cd"),
            ("reasoning", "ef"),
            ("content", "xy"),
            ("content", "z"),
        ]


# -- retries --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [
        ErrorReply(429, "rate limit reached", "rate_limit_reached_error"),
        ErrorReply(429, "The engine is currently overloaded", "engine_overloaded_error"),
        ErrorReply(500, "boom"),
        ErrorReply(502, "bad gateway"),
        ErrorReply(503, "unavailable"),
        ErrorReply(504, "timeout"),
        Reply(content="partial answer that gets cut", chunk_size=3, cut_after=3),
        Reply(content="abc", malformed_after=1),
        Reply(content="abc", error_after=1),
        Reply(content="abc", omit_done=True, cut_after=2),
    ],
    ids=["429", "overloaded", "500", "502", "503", "504", "cut", "malformed", "error-event", "no-done"],
)
def test_transient_faults_are_retried_and_partial_output_is_flagged(fault: Any) -> None:
    with FakeServer([fault, Reply(content="recovered")]) as server:
        events, done = run(collect(make_client(server), MESSAGES))
        retries = [e for e in events if isinstance(e, StreamRetry)]
        assert len(retries) == 1
        assert done.message["content"] == "recovered"
        assert len(server.requests) == 2
        # The retry event comes after any partial deltas, so a face can discard them.
        idx = events.index(retries[0])
        after = "".join(e.text for e in events[idx:] if isinstance(e, StreamDelta))
        assert after == "recovered"


def test_retry_after_is_honoured() -> None:
    with FakeServer(
        [ErrorReply(429, "slow down", "rate_limit_reached_error", headers={"Retry-After": "0.6"}), Reply(content="ok")]
    ) as server:
        start = time.monotonic()
        events, _ = run(collect(make_client(server), MESSAGES))
        assert time.monotonic() - start >= 0.55
        assert [e.delay for e in events if isinstance(e, StreamRetry)] == [0.6]


@pytest.mark.parametrize(
    ("fault", "kind", "needle"),
    [
        (ErrorReply(429, "You exceeded your current quota", "exceeded_current_quota_error"), "quota", "quota"),
        (ErrorReply(401, "Invalid Authentication", "invalid_authentication_error"), "auth", "KIMI_API_KEY"),
        (ErrorReply(403, "forbidden", "permission_denied_error"), "auth", "403"),
        (ErrorReply(400, "bad param", "invalid_request_error"), "bad_request", "bad param"),
        (
            ErrorReply(
                400,
                "Invalid request: Your request exceeded model token limit: 262144 (requested: 269030)",
                "invalid_request_error",
            ),
            "context_length",
            "token limit",
        ),
    ],
)
def test_permanent_faults_are_not_retried(fault: ErrorReply, kind: str, needle: str) -> None:
    with FakeServer([fault, Reply(content="never")]) as server:
        with pytest.raises(LLMError) as info:
            run(collect(make_client(server), MESSAGES))
        assert info.value.kind == kind
        assert needle in str(info.value)
        assert len(server.requests) == 1


def test_gives_up_after_max_retries_with_a_transient_error() -> None:
    with FakeServer([ErrorReply(503, "down")] * 4) as server:
        with pytest.raises(LLMError) as info:
            run(collect(make_client(server, max_retries=2), MESSAGES))
        assert info.value.transient
        assert "gave up after 3 attempts" in str(info.value)
        assert len(server.requests) == 3


def test_unreachable_endpoint_is_a_transient_error() -> None:
    server = FakeServer().start()
    port = server.port
    server.stop()
    client = ChatClient(
        ClientConfig(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="k", model="kimi-k3", max_retries=1, retry_base_delay=0.01
        )
    )
    with pytest.raises(LLMError) as info:
        run(collect(client, MESSAGES))
    assert info.value.transient
    assert "cannot reach" in str(info.value)


@pytest.mark.prepush
def test_a_silent_server_times_out() -> None:
    with FakeServer([Reply(content="late", first_delay=3), Reply(content="ok")]) as server:
        start = time.monotonic()
        events, done = run(collect(make_client(server, timeout=1.0), MESSAGES))
        assert time.monotonic() - start < 3
        assert any(isinstance(e, StreamRetry) and "did not answer" in e.error for e in events)
        assert done.message["content"] == "ok"


def test_error_helpers() -> None:
    assert parse_retry_after({"Retry-After-Ms": "1500"}) == 1.5
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({}) is None
    assert classify_status(529, "overloaded", None).transient
    assert classify_status(404, "no such model", "not_found").kind == "bad_request"
