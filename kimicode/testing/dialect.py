"""What a dialect is: how one real OpenAI-compatible server shapes its streams and errors (see dialects.py).

A `Dialect` says where a server puts reasoning text, what its tool-call ids look like, where usage and
cached tokens go, which keep-alive comments and first chunks it sends, and what its errors look like
(context-length error with its exact wording and status, 401, 429, 5xx).  ``FakeServer(dialect="vllm",
context_window=4096)`` then answers like vLLM and refuses a request over 4,096 tokens with vLLM's error.

Each entry names its sources: the server's code or documentation, or a recording in
``tests/fixtures/streams``.  Prompt tokens are estimated as request bytes / 4 (the fake has no
tokenizer), the same figure `FakeServer` reports as ``prompt_tokens``.
"""

from __future__ import annotations

import json
import random
import string
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kimicode.testing.replies import ALNUM, ErrorReply

__all__ = ["Dialect", "ErrorKind"]

ErrorKind = Literal["auth", "rate_limit", "overloaded", "server"]
"""The error kinds `Dialect.error` builds besides the context-length error."""

UsagePlace = Literal["include_usage", "always"]
CachedPlace = Literal["details", "top", "both", "deepseek", "none"]


def kimi_id(name: str, n: int) -> str:
    return f"functions.{name}:{n}"


def openai_id(name: str, n: int) -> str:
    return "call_" + "".join(random.choices(ALNUM, k=24))


def vllm_id(name: str, n: int) -> str:
    return "chatcmpl-tool-" + uuid.uuid4().hex


def sglang_id(name: str, n: int) -> str:
    return "call_" + uuid.uuid4().hex[:24]


def llamacpp_id(name: str, n: int) -> str:
    return "".join(random.choices(ALNUM, k=32))


def ollama_id(name: str, n: int) -> str:
    return "call_" + "".join(random.choices(string.ascii_lowercase + string.digits, k=8))


def deepseek_id(name: str, n: int) -> str:
    return f"call_{n % 100:02d}_" + "".join(random.choices(ALNUM, k=24))


def body(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj)


ContextError = Callable[[int, int, int], ErrorReply]
"""(prompt tokens, completion tokens asked, window) -> the server's context-length error."""


@dataclass(frozen=True)
class Dialect:
    """How one server shapes its answers (see the module docstring); build errors with `error`."""

    name: str
    source: str
    """Where this shape comes from (code, docs, recording)."""
    reasoning_field: str | None
    """Delta/message field of reasoning text; ``None``: the server never sends reasoning text."""
    tool_id: Callable[[str, int], str]
    """(tool name, running call number) -> tool-call id."""
    first_delta: dict[str, Any] | None
    """Delta of the opening role chunk; ``None``: no separate opening chunk."""
    usage_place: UsagePlace
    """``include_usage``: usage only when asked with ``stream_options``; ``always``: every stream."""
    cached: CachedPlace
    """Where cached prompt tokens go in ``usage``."""
    context_error: ContextError
    errors: Mapping[str, tuple[int, str, Mapping[str, str]]]
    """kind -> (status, body, headers)."""
    context_window: int = 131_072
    counts_completion: bool = False
    """Whether the limit applies to prompt + requested completion (vLLM, Moonshot) or the prompt alone."""
    truncates: bool = False
    """Over the window the server silently drops the prompt's start instead of refusing (Ollama)."""
    role_every_delta: bool = False
    usage_in_choice: bool = False
    """The finish chunk also carries ``usage`` inside ``choices[0]`` (Moonshot's legacy place)."""
    usage_chunk_choice: bool = False
    """The usage chunk has ``choices: [{"index": 0, "delta": {}}]`` instead of ``[]`` (LiteLLM)."""
    usage_null: bool = False
    """Every other chunk has ``"usage": null`` when usage was asked for (OpenAI)."""
    keepalive: bytes | None = None
    """An SSE comment sent before the first event (OpenRouter)."""
    tool_calls_whole: bool = False
    """A tool call arrives in one delta with its complete arguments (Ollama)."""
    reasoning_details: bool = False
    """Reasoning also goes out as ``reasoning_details`` entries (OpenRouter)."""
    finish_has_null_fields: bool = True
    """``finish_reason: null`` is written on non-final chunks (LiteLLM leaves it out)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Extra top-level keys of every chunk (``system_fingerprint``…)."""
    timings: bool = False
    """The usage chunk also carries llama.cpp's ``timings``."""
    discovery: str | None = None
    """Which server's discovery endpoints to answer like (``/v1/models``, ``/props``…; see discovery.py);
    ``None``: none (404)."""
    reasoning_tokens: bool = False
    """Usage carries ``completion_tokens_details.reasoning_tokens`` (OpenAI)."""

    def error(self, kind: ErrorKind) -> ErrorReply:
        """This server's error of `kind` as an `ErrorReply` ready to script."""
        if kind not in self.errors:
            raise ValueError(f"dialect {self.name!r} has no {kind!r} error; known: {sorted(self.errors)}")
        status, body, headers = self.errors[kind]
        return ErrorReply(status, body=body, headers=dict(headers))

    def context(self, prompt: int, completion: int = 0, window: int | None = None) -> ErrorReply:
        """This server's context-length error for a request of `prompt` (+ `completion`) tokens."""
        return self.context_error(prompt, completion, window if window is not None else self.context_window)

    def usage(self, prompt: int, completion: int, cached: int | None, reasoning: int = 0) -> dict[str, Any]:
        """A ``usage`` object with cached tokens where this server puts them."""
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        hit = cached or 0
        if cached is not None and self.cached in ("top", "both"):
            usage["cached_tokens"] = hit
        if cached is not None and self.cached in ("details", "both", "deepseek"):
            usage["prompt_tokens_details"] = {"cached_tokens": hit}
        if self.cached == "deepseek":
            usage["prompt_cache_hit_tokens"] = hit
            usage["prompt_cache_miss_tokens"] = prompt - hit
        if self.reasoning_tokens:
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        return usage


def openai_style(message: str, type_: str, code: str | int | None, param: str | None = None) -> str:
    return body({"error": {"message": message, "type": type_, "param": param, "code": code}})


def max_ctx_requested(p: int, c: int, w: int) -> str:
    return (
        f"This model's maximum context length is {w} tokens. However, you requested {p + c} tokens "
        f"({p} in the messages, {c} in the completion). Please reduce the length of the messages or completion."
    )
