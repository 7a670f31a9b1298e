"""Turn a scripted `Reply` into the JSON a given `Dialect` would send: stream chunks or one completion."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from kimicode.testing.dialects import Dialect
from kimicode.testing.replies import RecordedRequest, Reply, split_text

__all__ = ["completion_body", "prompt_tokens", "stream_chunks", "usage_for"]


def completion_id() -> str:
    """A fresh ``chatcmpl-…`` id."""
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def model_for(reply: Reply, request: RecordedRequest) -> str:
    """The model named in the answer: the reply's, else the request's, else ``fake-model``."""
    if reply.model is not None:
        return reply.model
    if isinstance(request.body, dict) and isinstance(request.body.get("model"), str):
        return str(request.body["model"])
    return "fake-model"


def prompt_tokens(request: RecordedRequest) -> int:
    """The fake's token count of a request: its bytes / 4 (no tokenizer, but stable and monotonic), without the
    tool definitions' bytes when the server's template leaves them out (`FakeServer(tools_counted=False)`)."""
    size = len(request.raw)
    body = request.body
    if not request.tools_counted and isinstance(body, dict) and isinstance(body.get("tools"), list):
        size -= len(json.dumps(body["tools"], ensure_ascii=False, separators=(",", ":")).encode())
    return max(1, size // 4)


def requested_completion(request: RecordedRequest) -> int:
    """``max_completion_tokens`` or ``max_tokens`` of the request (0 when absent or not a number)."""
    body = request.body if isinstance(request.body, dict) else {}
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def usage_for(reply: Reply, request: RecordedRequest, dialect: Dialect, window: int | None = None) -> dict[str, Any]:
    """The reply's usage: scripted, else estimated, with cached tokens where the dialect puts them."""
    if reply.usage is not None:
        return dict(reply.usage)
    text = (reply.reasoning or "") + (reply.content or "")
    text += "".join(call.name + call.arguments_text() for call in reply.tool_calls)
    prompt = prompt_tokens(request)
    if dialect.truncates and window is not None:
        prompt = min(prompt, window)  # Ollama reports what it kept, not what was sent
    return dialect.usage(prompt, len(text) // 4, reply.cached_tokens, len(reply.reasoning or "") // 4)


def _reasoning_field(reply: Reply, dialect: Dialect) -> str | None:
    return reply.reasoning_field or dialect.reasoning_field


def _usage_places(reply: Reply, dialect: Dialect, include_usage: bool) -> tuple[bool, bool]:
    """(usage inside the finish choice, usage chunk at the end)."""
    if reply.usage_mode is not None:
        mode = reply.usage_mode
        return mode in ("choice", "both"), include_usage and mode in ("chunk", "both")
    return dialect.usage_in_choice, dialect.usage_place == "always" or include_usage


def _reasoning_delta(field: str, piece: str, dialect: Dialect, index: int) -> dict[str, Any]:
    delta: dict[str, Any] = {field: piece}
    if dialect.reasoning_details:
        delta["reasoning_details"] = [{"type": "reasoning.text", "text": piece, "format": "unknown", "index": index}]
    return delta


def completion_body(
    reply: Reply, request: RecordedRequest, ids: list[str], dialect: Dialect, window: int | None = None
) -> dict[str, Any]:
    """A non-streamed ``chat.completion`` object."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    field = _reasoning_field(reply, dialect)
    if reply.reasoning is not None and field is not None:
        message[field] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": call_id, "type": call.type, "function": {"name": call.name, "arguments": call.arguments_text()}}
            for call, call_id in zip(reply.tool_calls, ids, strict=True)
        ]
    payload: dict[str, Any] = {
        "id": completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_for(reply, request),
        "choices": [{"index": 0, "message": message, "finish_reason": reply.effective_finish_reason()}],
    }
    payload.update(dialect.extra)
    if reply.usage_mode != "none":
        payload["usage"] = usage_for(reply, request, dialect, window)
    return payload


def stream_chunks(
    reply: Reply,
    request: RecordedRequest,
    ids: list[str],
    include_usage: bool,
    dialect: Dialect,
    window: int | None = None,
) -> Iterator[dict[str, Any]]:
    """The JSON data events of one streamed reply in the dialect's shape, in wire order (no ``[DONE]``)."""
    chunk_id = completion_id()
    created = int(time.time())
    model = model_for(reply, request)
    in_choice, usage_chunk = _usage_places(reply, dialect, include_usage)

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        if dialect.role_every_delta:
            delta = {"role": "assistant", **delta}
        choice: dict[str, Any] = {"index": 0, "delta": delta}
        if finish_reason is not None or dialect.finish_has_null_fields:
            choice["finish_reason"] = finish_reason
        out: dict[str, Any] = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            **dialect.extra,
            "choices": [choice],
        }
        if include_usage and dialect.usage_null:
            out["usage"] = None
        return out

    if dialect.first_delta is not None:
        yield chunk(dict(dialect.first_delta))
    field = _reasoning_field(reply, dialect)
    if field is not None:
        for index, piece in enumerate(split_text(reply.reasoning, reply.chunk_size)):
            yield chunk(_reasoning_delta(field, piece, dialect, index))
    for piece in split_text(reply.content, reply.chunk_size):
        yield chunk({"content": piece})
    for index, (call, call_id) in enumerate(zip(reply.tool_calls, ids, strict=True)):
        if dialect.tool_calls_whole:
            whole = {"name": call.name, "arguments": call.arguments_text()}
            yield chunk({"tool_calls": [{"id": call_id, "index": index, "type": call.type, "function": whole}]})
            continue
        first = {"name": call.name, "arguments": ""}
        yield chunk({"tool_calls": [{"index": index, "id": call_id, "type": call.type, "function": first}]})
        for piece in split_text(call.arguments_text(), reply.chunk_size):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    final = chunk({}, reply.effective_finish_reason())
    usage = usage_for(reply, request, dialect, window)
    if in_choice:
        final["choices"][0]["usage"] = usage
    yield final
    if usage_chunk:
        last = chunk({})
        last["choices"] = [{"index": 0, "delta": {}}] if dialect.usage_chunk_choice else []
        last["usage"] = usage
        if dialect.timings:
            last["timings"] = {
                "cache_n": usage.get("prompt_tokens_details", {}).get("cached_tokens", 0),
                "prompt_n": usage["prompt_tokens"],
                "predicted_n": usage["completion_tokens"],
            }
        yield last
