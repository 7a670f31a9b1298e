"""Real servers' recorded bytes, served byte for byte, through kimicode's own client.

The recordings (tests/fixtures/streams, from llama.cpp's llama-server and a LiteLLM proxy) are parsed
here independently of kimicode, and the assembled message, usage and tool calls must match.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURES

from kimicode.llm.client import ChatClient, ClientConfig, Completion, LLMError
from kimicode.testing import FakeServer, RawReply

STREAMS = FIXTURES / "streams"
MESSAGES = [{"role": "user", "content": "hi"}]


def expected(recording: Path) -> dict[str, Any]:
    """What the recording says, read with nothing but json: text, reasoning, calls, finish, usage."""
    text = reasoning = ""
    calls: dict[int, dict[str, str]] = {}
    finish = usage = None
    for line in recording.read_text().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text += delta.get("content") or ""
            reasoning += delta.get("reasoning_content") or ""
            for tc in delta.get("tool_calls") or []:
                slot = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
                slot["id"] = tc.get("id") or slot["id"]
                fn = tc.get("function") or {}
                slot["name"] = fn.get("name") or slot["name"]
                slot["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return {"text": text, "reasoning": reasoning, "calls": calls, "finish": finish, "usage": usage}


def replay(recording: Path, **config: Any) -> Completion:
    async def run(srv: FakeServer) -> Completion:
        client = ChatClient(
            ClientConfig(base_url=srv.base_url, api_key="k", model="smollm2-135m", max_retries=0, **config)
        )
        try:
            async for event in client.stream(MESSAGES):
                if isinstance(event, Completion):
                    return event
        finally:
            await client.aclose()
        raise AssertionError("no completion")

    with FakeServer([RawReply.from_recording(recording)]) as srv:
        return asyncio.run(run(srv))


@pytest.mark.parametrize(
    "name",
    [
        "llamacpp/chat-with-tools.stream.sse",
        "llamacpp/chat-tool-choice-required.stream.sse",
        "llamacpp/kimicode-plain.response.txt",
        "llamacpp/kimicode-tool-history.response.txt",
        "litellm/chat-via-litellm.response.txt",
        "litellm/tool-call-via-litellm.response.txt",
    ],
)
def test_recorded_stream_assembles_exactly(name: str) -> None:
    recording = STREAMS / name
    want = expected(recording)
    got = replay(recording)
    assert want["text"] or want["calls"], "the recording must hold an answer"
    assert got.message["content"] == want["text"]
    assert got.finish_reason == want["finish"]
    assert got.usage == want["usage"]
    if want["reasoning"]:
        assert got.message["reasoning_content"] == want["reasoning"]
    calls = got.message.get("tool_calls") or []
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        (c["id"], c["name"], c["arguments"]) for _, c in sorted(want["calls"].items())
    ]


def test_llamacpp_first_chunk_content_null_and_timings_are_harmless() -> None:
    got = replay(STREAMS / "llamacpp" / "chat-with-tools.stream.sse")
    assert got.message["role"] == "assistant"
    assert isinstance(got.message["content"], str) and got.message["content"].startswith("You can use")
    assert got.usage is not None and got.usage["prompt_tokens_details"] == {"cached_tokens": 0}
    assert "reasoning_content" not in got.message  # a server that never reasoned gets none sent back


def test_litellm_tool_call_keeps_id_and_reasoning_byte_for_byte() -> None:
    got = replay(STREAMS / "litellm" / "tool-call-via-litellm.response.txt")
    assert got.message["reasoning_content"] == "I will read notes.txt"
    assert got.message["tool_calls"] == [
        {
            "id": "call_Ab3xYz9",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'},
        }
    ]
    assert got.usage is not None and got.usage["completion_tokens_details"]["reasoning_tokens"] == 5


@pytest.mark.parametrize("name", ["llamacpp/kimicode-overflow.response.txt"])
def test_recorded_context_error_reaches_the_caller_with_its_numbers(name: str) -> None:
    with pytest.raises(LLMError) as info:
        replay(STREAMS / name)
    err = info.value
    assert err.status == 400
    assert "request (4587 tokens) exceeds the available context size (4096 tokens)" in err.message
    assert err.error_type == "exceed_context_size_error"


def test_recorded_error_body_matches_the_llamacpp_dialect() -> None:
    """The fake's llamacpp context error is the recorded body, number for number."""
    from kimicode.testing import get_dialect

    recorded = (STREAMS / "llamacpp" / "context-error.body.json").read_bytes()
    made = get_dialect("llamacpp").context(6031, 0, 4096)
    assert made.status == 400
    assert json.loads(made.body_bytes()) == json.loads(recorded)
