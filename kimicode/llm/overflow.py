"""Recognise "the request does not fit the context window" in every server's own words.

Each OpenAI-compatible server words this error differently, puts it under a different status, code or
type, and some (llama.cpp, and Ollama or LM Studio which embed it) add the numbers as fields. One
public function, `context_overflow`, turns any of them into a `ContextOverflow` carrying whatever numbers
the server gave: its window, the prompt tokens it counted, the completion asked for. The wordings and
where each one comes from are listed in `tests/llm/test_overflow.py`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_CODES = frozenset(
    {
        "context_length_exceeded",  # OpenAI, Azure OpenAI, Groq
        "exceed_context_size_error",  # llama.cpp (and Ollama, LM Studio that embed it)
        "contextwindowexceedederror",  # LiteLLM proxy
        "context_window_exceeded",
        "model_context_window_exceeded",
        "model_max_prompt_tokens_exceeded",  # GitHub Copilot-style gateways
    }
)

_MARKERS = (
    "maximum context length",  # OpenAI, Azure, vLLM, DeepSeek, OpenRouter, SGLang, Mistral
    "context length exceeded",
    "context_length_exceeded",
    "exceeds the available context size",  # llama.cpp
    "exceed_context_size_error",
    "exceeds the context window",  # OpenAI (newer wording)
    "exceeded model token limit",  # Moonshot
    "input token length too long",  # Moonshot
    "prompt is too long",  # Anthropic-compatible gateways, Fireworks
    "longer than the model's context length",  # SGLang, Together
    "when context the overflows",  # LM Studio (sic)
    "model is loaded with context length",  # LM Studio
    "reached context length of",  # LM Studio, mid-generation
    "context size has been exceeded",  # LM Studio MLX engine
    "contextwindowexceedederror",  # LiteLLM
    "input length exceeds the context length",  # Ollama
    "exceeds the maximum number of tokens allowed",  # Gemini's OpenAI-compatible endpoint
    "maximum prompt length is",  # xAI
    "too large for model with",  # Mistral
    "`inputs` tokens + `max_new_tokens` must be",  # Hugging Face TGI (Together's older stack)
    "input is too long for requested model",  # Bedrock through gateways
    "please reduce the length of the messages",  # Groq and OpenAI-style wordings without numbers
    "too many tokens",
)

_NOT_CONTEXT = ("rate limit", "per minute", "per day", "tpm", "please wait", "try again in", "throttl")
"""Wordings of rate limits that mention tokens but are not about the window."""

_N = r"(\d[\d,_]*)"
_WINDOW = [
    rf"maximum context length (?:is|of) {_N}",
    rf"maximum context length \({_N}\)",
    rf"available context size \({_N} tokens\)",
    rf"model'?s? context length \({_N} tokens\)",
    rf"loaded with context length of only {_N}",
    rf"reached context length of {_N}",
    rf"model token limit[:\s]+{_N}",
    rf"maximum number of tokens allowed \({_N}\)",
    rf"maximum prompt length is {_N}",
    rf"too large for model with {_N} maximum",
    rf"must be <= {_N}",
    rf"tokens? > {_N} maximum",
    rf"context (?:window|length|size) (?:of|is) {_N}",
    rf"\bn_ctx\W+{_N}",
    rf"max input tokens={_N}",  # LiteLLM's own pre-call check ("Max Input Tokens=2048, Got=3019")
]
_PROMPT = [
    rf"\bn_prompt_tokens\W+{_N}",
    rf"request \({_N} tokens\) exceeds",
    rf"messages resulted in {_N} tokens",
    rf"\({_N} in the messages",
    rf"\({_N} in your prompt",
    rf"request has {_N} input tokens",
    rf"prompt contains (?:at least )?{_N} input tokens",
    rf"{_N} tokens from the input messages",
    rf"the input \({_N} tokens\)",
    rf"keep the first {_N} tokens",
    rf"prompt is too long: {_N} tokens",
    rf"input token count \({_N}\)",
    rf"request contains {_N} tokens",
    rf"prompt contains {_N} tokens",
    rf"given: {_N} `inputs` tokens",
    rf"input length \({_N}\)",
    rf"max input tokens=\d+, got={_N}",  # LiteLLM's pre-call check
]
_OPENROUTER_INPUT = re.compile(rf"\({_N} of text input(?:, {_N} of tool input)?", re.IGNORECASE)
_COMPLETION = [
    rf"{_N} (?:in|for) the completion",
    rf"{_N} tokens for the completion",
    rf"{_N} in the output",
    rf"requested {_N} output tokens",
    rf"max_completion_tokens' is too large: {_N}",
    rf"and {_N} `max_new_tokens`",
]
_TOTAL = [
    rf"\(requested: {_N}\)",
    rf"requested a total of {_N} tokens",
    rf"for a total of (?:at least )?{_N} tokens",
    rf"you requested (?:about )?{_N} tokens",
]
_PATTERNS = {"window": _WINDOW, "prompt": _PROMPT, "completion": _COMPLETION, "total": _TOTAL}


@functools.cache
def _compiled(kind: str) -> list[re.Pattern[str]]:
    """The patterns of `kind`, compiled on the first context error rather than at import (~5-10 ms of
    every start, for errors most runs never see)."""
    return [re.compile(p, re.IGNORECASE) for p in _PATTERNS[kind]]


_COMPLETION_TOO_LARGE = re.compile(r"max_(?:completion_)?tokens'? (?:or '?max_completion_tokens'? )?is too large", re.I)


@dataclass(frozen=True)
class ContextOverflow:
    """What a context-length error said. Every number is None when the server did not give it."""

    window: int | None = None
    """The server's context window (llama.cpp `n_ctx`, "maximum context length is N", ...)."""
    prompt_tokens: int | None = None
    """The input tokens the server counted for the refused request (completion not included)."""
    completion_tokens: int | None = None
    """The completion the refused request asked for, when the server said it."""
    total_tokens: int | None = None
    """Input plus requested completion, when the server gave only that sum (Moonshot, vLLM)."""
    completion_too_large: bool = False
    """The input fits; the requested completion (max_tokens) does not (vLLM's wording)."""

    def prompt_estimate(self, max_completion: int | None) -> int | None:
        """The input tokens: said outright, or the total minus the completion (said, or what we asked)."""
        if self.prompt_tokens is not None:
            return self.prompt_tokens
        if self.total_tokens is None:
            return None
        completion = self.completion_tokens if self.completion_tokens is not None else max_completion
        if completion is None:
            return None
        prompt = self.total_tokens - completion
        return prompt if prompt > 0 else None


def _flatten(value: Any, out: list[str], fields: dict[str, int], depth: int = 0) -> None:
    """Collect every string in a JSON error body (nested JSON strings included) and numeric fields."""
    if depth > 6:
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if (
                key in ("n_ctx", "n_prompt_tokens")
                and isinstance(item, int)
                and not isinstance(item, bool)
                and 0 < item < 10**9
            ):
                fields.setdefault(str(key), item)
            _flatten(item, out, fields, depth + 1)
    elif isinstance(value, list):
        for item in value[:20]:
            _flatten(item, out, fields, depth + 1)
    elif isinstance(value, str) and value:
        out.append(value[:4_000])
        stripped = value.strip()
        start = stripped.find("{")
        if start >= 0 and stripped.endswith("}"):
            try:
                _flatten(json.loads(stripped[start:]), out, fields, depth + 1)
            except ValueError:
                pass


def _first(kind: str, text: str) -> int | None:
    for pattern in _compiled(kind):
        match = pattern.search(text)
        if match:
            digits = match.group(1).replace(",", "").replace("_", "")
            if digits.isdigit() and 0 < int(digits) < 10**9:
                return int(digits)
    return None


def is_context_wording(text: str, codes: tuple[str, ...] = ()) -> bool:
    """True when an error code or message says the request did not fit the context window."""
    if any(str(c).strip().lower() in _CODES for c in codes if c):
        return True
    lowered = text.lower()
    if not any(marker in lowered for marker in _MARKERS):
        return False
    return not (any(word in lowered for word in _NOT_CONTEXT) and "context" not in lowered)


def context_overflow(
    status: int | None,
    message: str,
    error_type: str | None = None,
    *,
    code: str | int | None = None,
    body: Any = None,
) -> ContextOverflow | None:
    """The context-length error in an error response, or None when it is some other error.

    `status` is the HTTP status (None for an error inside a stream, which some servers send with 200);
    `message`, `error_type` and `code` are the error's fields; `body` the whole parsed body when there
    is one (llama.cpp puts `n_ctx` and `n_prompt_tokens` beside the message; Ollama and LiteLLM may nest
    another server's JSON error inside their message string). Rate limits (429) and authentication
    errors are never context errors, whatever they say.
    """
    if status in (401, 403, 429):
        return None
    texts: list[str] = [message or ""]
    fields: dict[str, int] = {}
    if body is not None:
        _flatten(body, texts, fields)
    _flatten(message, [], fields)  # a message that is itself JSON (Ollama's wrapped llama.cpp error)
    text = " | ".join(t for t in texts if t)
    codes = tuple(str(c) for c in (error_type, code) if c is not None)
    if not is_context_wording(text, codes) and not fields:
        return None
    window = fields.get("n_ctx") or _first("window", text)
    prompt = fields.get("n_prompt_tokens") or _first("prompt", text)
    openrouter = _OPENROUTER_INPUT.search(text)
    if prompt is None and openrouter:
        prompt = sum(int(g.replace(",", "")) for g in openrouter.groups() if g)
    completion = _first("completion", text)
    total = _first("total", text)
    if prompt is not None and total is not None and prompt >= total:
        total = None  # "you requested N tokens" was the input alone (OpenAI's older wording)
    return ContextOverflow(
        window=window,
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=total,
        completion_too_large=bool(_COMPLETION_TOO_LARGE.search(text)),
    )


__all__ = ["ContextOverflow", "context_overflow", "is_context_wording"]
