"""FakeServer's streams, tool call ids, usage and plain completions, read with the real openai SDK, urllib
and raw sockets (faults, recording and lifecycle: test_fake_server_faults.py)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import pytest
from wire_helpers import MESSAGES, async_client, collect_stream, raw_stream_events, sync_client

from kimicode.testing import FakeServer, Reply, ToolCall

# ----- streaming shape --------------------------------------------------------------------------------


def test_stream_reassembles_reasoning_content_and_tool_calls(server: FakeServer) -> None:
    server.add(
        Reply(
            reasoning="I should read the file first.",
            content="Reading it now.",
            tool_calls=[ToolCall("read_file", {"path": "src/main.py"}), ToolCall("list_dir")],
            chunk_size=5,
        )
    )
    chunks = asyncio.run(collect_stream(server, stream_options={"include_usage": True}))

    first = chunks[0].choices[0].delta
    assert first.role == "assistant"
    assert first.content == ""
    kinds: list[str] = []
    reasoning = content = ""
    calls: dict[int, dict[str, str]] = {}
    finish: list[str] = []
    for chunk in chunks[1:]:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        extra = delta.model_extra or {}
        if extra.get("reasoning_content"):
            kinds.append("reasoning")
            reasoning += extra["reasoning_content"]
            assert len(extra["reasoning_content"]) <= 5
        if delta.content:
            kinds.append("content")
            content += delta.content
        for frag in delta.tool_calls or []:
            kinds.append("tool")
            entry = calls.setdefault(frag.index, {"id": "", "name": "", "arguments": ""})
            if frag.id:
                entry["id"] = frag.id
            if frag.function and frag.function.name:
                entry["name"] = frag.function.name
            if frag.function and frag.function.arguments:
                entry["arguments"] += frag.function.arguments
        if choice.finish_reason:
            finish.append(choice.finish_reason)

    assert reasoning == "I should read the file first."
    assert content == "Reading it now."
    assert kinds == sorted(kinds, key=["reasoning", "content", "tool"].index)
    assert calls == {
        0: {"id": "functions.read_file:0", "name": "read_file", "arguments": '{"path": "src/main.py"}'},
        1: {"id": "functions.list_dir:1", "name": "list_dir", "arguments": ""},
    }
    assert finish == ["tool_calls"]
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == []
    raw = server.requests[0].raw
    assert usage_chunk.usage is not None
    assert usage_chunk.usage.prompt_tokens == len(raw) // 4
    assert usage_chunk.usage.total_tokens == usage_chunk.usage.prompt_tokens + usage_chunk.usage.completion_tokens
    assert all(chunk.model == "kimi-test" for chunk in chunks)
    assert len({chunk.id for chunk in chunks}) == 1


@pytest.mark.parametrize(("field", "other"), [("reasoning_content", "reasoning"), ("reasoning", "reasoning_content")])
def test_reasoning_field_name_is_configurable(server: FakeServer, field: str, other: str) -> None:
    server.add(Reply(reasoning="think think", content="ok", reasoning_field=field, model="served-model"))
    chunks = asyncio.run(collect_stream(server))
    extras = [chunk.choices[0].delta.model_extra or {} for chunk in chunks if chunk.choices]
    assert "".join(e.get(field) or "" for e in extras) == "think think"
    assert all(other not in e for e in extras)
    assert {chunk.model for chunk in chunks} == {"served-model"}


def test_raw_sse_framing_and_empty_argument_tool_call(server: FakeServer) -> None:
    server.add(Reply(tool_calls=[ToolCall("now", "")], finish_reason="length"))
    raw, events = raw_stream_events(server, {"model": "m", "messages": MESSAGES, "stream": True})
    assert raw.status_line == "HTTP/1.1 200 OK"
    assert raw.headers["content-type"] == "text/event-stream"
    assert raw.headers["transfer-encoding"] == "chunked"
    assert raw.complete
    assert events[-1] == "[DONE]"
    parsed = [json.loads(e) for e in events[:-1]]
    assert [p["object"] for p in parsed] == ["chat.completion.chunk"] * 3
    assert parsed[0]["id"].startswith("chatcmpl-")
    assert parsed[1]["choices"][0]["delta"] == {
        "tool_calls": [
            {"index": 0, "id": "functions.now:0", "type": "function", "function": {"name": "now", "arguments": ""}}
        ]
    }
    assert parsed[2]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "length"}
    # no include_usage requested: no usage key at all
    assert all("usage" not in p for p in parsed)


@pytest.mark.prepush
def test_chunks_are_flushed_as_they_are_produced(server: FakeServer) -> None:
    delay = 0.4
    server.add(Reply(content="ab", chunk_size=1, chunk_delay=delay))

    async def timed() -> list[float]:
        start = time.monotonic()
        stamps: list[float] = []
        async with async_client(server) as client:
            stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            async for _ in stream:
                stamps.append(time.monotonic() - start)
        return stamps

    stamps = asyncio.run(timed())
    # role chunk, "a", "b", finish: three delays between four chunks
    assert len(stamps) == 4
    assert stamps[0] < delay * 0.75, "first chunk must arrive before the next delay finishes"
    assert stamps[1] < 2 * delay * 0.9 + 0.2
    assert stamps[-1] >= 3 * delay * 0.9


# ----- tool call ids ----------------------------------------------------------------------------------


def test_kimi_ids_count_across_replies_openai_style_and_explicit_ids(server: FakeServer) -> None:
    server.add(
        Reply(tool_calls=[ToolCall("a"), ToolCall("b", {"x": 1})]),
        Reply(tool_calls=[ToolCall("c")], id_style="openai"),
        Reply(tool_calls=[ToolCall("d"), ToolCall("e", id="my-own-id")]),
    )
    ids: list[str] = []
    with sync_client(server) as client:
        for _ in range(3):
            resp = client.chat.completions.create(model="m", messages=MESSAGES)
            assert resp.choices[0].finish_reason == "tool_calls"
            ids += [call.id for call in resp.choices[0].message.tool_calls or []]
    assert ids[:2] == ["functions.a:0", "functions.b:1"]
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", ids[2])
    assert ids[3:] == ["functions.d:3", "my-own-id"]


# ----- usage ------------------------------------------------------------------------------------------

USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15, "cached_tokens": 3}


@pytest.mark.parametrize(
    ("mode", "include_usage", "in_choice", "in_chunk"),
    [
        ("both", True, True, True),
        ("chunk", True, False, True),
        ("chunk", False, False, False),
        ("choice", True, True, False),
        ("choice", False, True, False),
        ("none", True, False, False),
    ],
)
def test_usage_modes(server: FakeServer, mode: Any, include_usage: bool, in_choice: bool, in_chunk: bool) -> None:
    server.add(Reply(content="hi", usage=USAGE, usage_mode=mode))
    payload: dict[str, Any] = {"model": "m", "stream": True}
    if include_usage:
        payload["stream_options"] = {"include_usage": True}
    _, events = raw_stream_events(server, payload)
    parsed = [json.loads(e) for e in events[:-1]]
    finish = [p for p in parsed if p["choices"] and p["choices"][0]["finish_reason"]]
    assert len(finish) == 1
    assert (finish[0]["choices"][0].get("usage") == USAGE) is in_choice
    usage_chunks = [p for p in parsed if p["choices"] == []]
    assert [c["usage"] for c in usage_chunks] == ([USAGE] if in_chunk else [])
    if in_chunk:
        assert parsed[-1] is usage_chunks[0]
    if include_usage:
        assert all(p["usage"] is None for p in parsed if p["choices"])


def test_sdk_reads_usage_from_both_places(server: FakeServer) -> None:
    server.add(Reply(content="hi", usage=USAGE, usage_mode="both"))
    chunks = asyncio.run(collect_stream(server, stream_options={"include_usage": True}))
    finish = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
    assert (finish.choices[0].model_extra or {})["usage"] == USAGE
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == 10
    assert (chunks[-1].usage.model_extra or {})["cached_tokens"] == 3


# ----- non-streaming ----------------------------------------------------------------------------------


def test_non_streaming_completion(server: FakeServer) -> None:
    server.add(
        Reply(
            content="Let me look.",
            reasoning="need the file",
            reasoning_field="reasoning",
            tool_calls=[ToolCall("read_file", '{"path": "a.py"')],
            usage=USAGE,
        ),
        Reply(content="done"),
    )
    with sync_client(server) as client:
        resp = client.chat.completions.create(model="kimi-x", messages=MESSAGES)
        assert resp.object == "chat.completion"
        assert resp.model == "kimi-x"
        msg = resp.choices[0].message
        assert msg.role == "assistant"
        assert msg.content == "Let me look."
        assert (msg.model_extra or {})["reasoning"] == "need the file"
        assert msg.tool_calls is not None
        call = msg.tool_calls[0]
        assert call.type == "function"
        assert (call.id, call.function.name, call.function.arguments) == (
            "functions.read_file:0",
            "read_file",
            '{"path": "a.py"',
        )
        assert resp.choices[0].finish_reason == "tool_calls"
        assert resp.usage is not None
        assert resp.usage.total_tokens == 15

        resp = client.chat.completions.create(model="kimi-x", messages=MESSAGES)
        assert resp.choices[0].finish_reason == "stop"
        assert resp.choices[0].message.tool_calls is None
        assert resp.usage is not None
        assert resp.usage.prompt_tokens == len(server.requests[1].raw) // 4
