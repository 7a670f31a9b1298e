"""Property-based tests of the stream accumulator: interleaved parallel tool calls and usage anywhere."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import split_at
from hypothesis import given, settings
from hypothesis import strategies as st

from kimicode.llm.accumulate import StreamAccumulator, usage_numbers

USAGE = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150, "cached_tokens": 64}


def _choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "finish_reason": finish}


@pytest.mark.prepush
@settings(max_examples=200, deadline=None)
@given(
    reasoning=st.text(max_size=30),
    content=st.text(max_size=30),
    calls=st.lists(st.tuples(st.sampled_from(["bash", "read_file", "grep"]), st.text(max_size=25)), max_size=4),
    cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=6),
    order=st.randoms(use_true_random=False),
    batch=st.integers(min_value=1, max_value=3),
    usage_mode=st.sampled_from(["chunk", "choice", "both", "none", "null-choices", "missing-choices"]),
    null_usage=st.booleans(),
)
def test_interleaved_tool_calls_and_usage_anywhere_give_the_same_message(
    reasoning: str,
    content: str,
    calls: list[tuple[str, str]],
    cuts: list[int],
    order: Any,
    batch: int,
    usage_mode: str,
    null_usage: bool,
) -> None:
    """Parallel calls' fragments may interleave (joined by index, ids from the first fragment), several
    fragments may share a chunk, and usage may come in its own chunk (`choices` [], null or missing),
    inside the finish choice, or both: the message and usage are always the same."""
    chunks: list[dict[str, Any]] = [{"choices": [_choice({"role": "assistant", "content": ""})]}]
    chunks += [{"choices": [_choice({"reasoning_content": p})]} for p in split_at(reasoning, cuts)]
    chunks += [{"choices": [_choice({"content": p})]} for p in split_at(content, cuts)]
    # each call: a first fragment with id and name, then its argument pieces; calls interleave freely
    streams: list[list[dict[str, Any]]] = []
    for i, (name, args) in enumerate(calls):
        frags = [
            {"index": i, "id": f"functions.{name}:{i}", "type": "function", "function": {"name": name, "arguments": ""}}
        ]
        frags += [{"index": i, "function": {"arguments": p}} for p in split_at(args, cuts)]
        streams.append(frags)
    merged: list[dict[str, Any]] = []
    while any(streams):
        live = [s for s in streams if s]
        merged.append(order.choice(live).pop(0))
    for k in range(0, len(merged), batch):
        chunks.append({"choices": [_choice({"tool_calls": merged[k : k + batch]})]})
    finish = "tool_calls" if calls else "stop"
    final_choice = _choice({}, finish)
    if usage_mode in ("choice", "both"):
        final_choice["usage"] = USAGE
    chunks.append({"choices": [final_choice]})
    if usage_mode in ("chunk", "both"):
        chunks.append({"choices": [], "usage": USAGE})
    elif usage_mode == "null-choices":
        chunks.append({"choices": None, "usage": USAGE})
    elif usage_mode == "missing-choices":
        chunks.append({"usage": USAGE})
    if null_usage:
        for chunk in chunks:
            chunk.setdefault("usage", None)

    acc = StreamAccumulator()
    deltas = [d for chunk in chunks for d in acc.add(chunk)]
    msg = acc.message()
    assert msg["reasoning_content"] == reasoning and msg["content"] == content
    got = [(tc["id"], tc["function"]["name"], tc["function"]["arguments"]) for tc in msg.get("tool_calls", [])]
    assert got == [(f"functions.{n}:{i}", n, a) for i, (n, a) in enumerate(calls)]
    assert acc.finish_reason == finish
    assert usage_numbers(acc.usage) == ((120, 30, 64) if usage_mode != "none" else (0, 0, 0))
    # the live deltas carry exactly the text of the message, per kind and per call
    assert "".join(d.text for d in deltas if d.kind == "content") == content
    for i, (_, args) in enumerate(calls):
        assert "".join(d.text for d in deltas if d.kind == "tool_arguments" and d.index == i) == args
