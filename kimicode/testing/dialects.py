"""The dialects `FakeServer` speaks: each real server's stream shape, ids, usage and errors.

``FakeServer(dialect="vllm", context_window=4096)`` answers like vLLM and refuses a request over
4,096 tokens with vLLM's own error.  Each entry names its sources (the server's code or docs, or a
recording in ``tests/fixtures/streams``).  The `Dialect` fields are documented in dialect.py.
"""

from __future__ import annotations

import dataclasses

from kimicode.testing.dialect import (
    Dialect,
    ErrorKind,
    body,
    deepseek_id,
    kimi_id,
    llamacpp_id,
    max_ctx_requested,
    ollama_id,
    openai_id,
    openai_style,
    sglang_id,
    vllm_id,
)
from kimicode.testing.replies import ErrorReply

__all__ = ["DIALECTS", "Dialect", "ErrorKind", "get_dialect"]

_RETRY = {"retry-after": "1"}

# ----- Moonshot / Kimi -------------------------------------------------------------------------------
# Sources: platform.kimi.ai/docs/api/errors and the error-code help page (types, statuses); the
# context wording is from MoonshotAI/kimi-cli issue #2011; stream shape (reasoning_content, usage in
# choices[0] of the finish chunk, top-level cached_tokens, functions.NAME:N ids) from kosong's
# chat_provider/kimi.py and /work/shared/reference/providers.md §1.
MOONSHOT = Dialect(
    name="moonshot",
    discovery="moonshot",
    source="platform.kimi.ai docs (errors, thinking); MoonshotAI/kimi-cli kosong kimi.py; kimi-cli #2011",
    reasoning_field="reasoning_content",
    tool_id=kimi_id,
    first_delta={"role": "assistant", "content": ""},
    usage_place="include_usage",
    usage_in_choice=True,
    usage_null=True,
    cached="both",
    context_window=262_144,
    counts_completion=True,
    context_error=lambda p, c, w: ErrorReply(
        400,
        body=body(
            {
                "error": {
                    "message": f"Invalid request: Your request exceeded model token limit: {w} (requested: {p + c})",
                    "type": "invalid_request_error",
                }
            }
        ),
    ),
    errors={
        "auth": (
            401,
            body({"error": {"message": "Invalid Authentication", "type": "invalid_authentication_error"}}),
            {},
        ),
        "rate_limit": (
            429,
            body(
                {
                    "error": {
                        "message": "Your account org-fake request reached organization max RPM: 3, "
                        "please try again after 1 seconds",
                        "type": "rate_limit_reached_error",
                    }
                }
            ),
            _RETRY,
        ),
        "overloaded": (
            429,
            body(
                {
                    "error": {
                        "message": "The engine is currently overloaded, please try again later",
                        "type": "engine_overloaded_error",
                    }
                }
            ),
            _RETRY,
        ),
        "server": (500, body({"error": {"message": "Internal server error", "type": "server_error"}}), {}),
    },
)

# ----- OpenAI ------------------------------------------------------------------------------------
# Sources: openai-python types chat_completion_chunk.py / completion_usage.py (usage only with
# stream_options.include_usage, "usage": null on the other chunks, prompt_tokens_details.cached_tokens),
# platform.openai.com error-codes guide (context_length_exceeded, invalid_api_key, rate_limit_exceeded).
OPENAI = Dialect(
    name="openai",
    discovery="openai",
    reasoning_tokens=True,
    source="openai-python types; platform.openai.com/docs/guides/error-codes",
    reasoning_field=None,
    tool_id=openai_id,
    first_delta={"role": "assistant", "content": "", "refusal": None},
    usage_place="include_usage",
    usage_null=True,
    cached="details",
    context_window=128_000,
    extra={"system_fingerprint": "fp_fake0000", "service_tier": "default"},
    context_error=lambda p, c, w: ErrorReply(
        400,
        body=openai_style(
            f"This model's maximum context length is {w} tokens. However, your messages resulted in {p} tokens. "
            "Please reduce the length of the messages.",
            "invalid_request_error",
            "context_length_exceeded",
            "messages",
        ),
    ),
    errors={
        "auth": (
            401,
            openai_style(
                "Incorrect API key provided: sk-fake***1234. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                "invalid_request_error",
                "invalid_api_key",
            ),
            {},
        ),
        "rate_limit": (
            429,
            openai_style(
                "Rate limit reached for gpt-fake in organization org-fake on requests per min (RPM): "
                "Limit 3, Used 3, Requested 1. Please try again in 20ms.",
                "requests",
                "rate_limit_exceeded",
            ),
            {"retry-after-ms": "20"},
        ),
        "overloaded": (
            503,
            openai_style("The engine is currently overloaded, please try again later.", "server_error", None),
            {},
        ),
        "server": (
            500,
            openai_style(
                "The server had an error while processing your request. Sorry about that!", "server_error", None
            ),
            {},
        ),
    },
)


# ----- vLLM --------------------------------------------------------------------------------------
# Sources: vllm entrypoints/openai serving code (ErrorResponse {"error": {message, type, param, code}}
# since v0.10; "This model's maximum context length is N tokens. However, your request has M input
# tokens. Please reduce the length of the input messages." for prompts over max_model_len, and the
# "you requested" wording when prompt + max_tokens is over); PR #27752 / #33402 (reasoning field
# `reasoning`); entrypoints/chat_utils.py make_tool_call_id() -> "chatcmpl-tool-<uuid4 hex>"
# ("functions.NAME:IDX" for kimi_k2); 401 from the --api-key middleware
# is {"error": "Unauthorized"}.  vLLM has no rate limit of its own: a full queue answers 503.
def _vllm_context(p: int, c: int, w: int) -> ErrorReply:
    if p >= w:
        msg = (
            f"This model's maximum context length is {w} tokens. However, your request has {p} input tokens. "
            "Please reduce the length of the input messages."
        )
    else:
        msg = (
            f"'max_tokens' or 'max_completion_tokens' is too large: {c}. This model's maximum context length is "
            f"{w} tokens and your request has {p} input tokens ({c} > {w} - {p})."
        )
    return ErrorReply(400, body=openai_style(msg, "BadRequestError", 400))


VLLM = Dialect(
    name="vllm",
    discovery="vllm",
    source="vllm entrypoints/openai serving_engine.py, protocol.py; PRs #27752, #33402",
    reasoning_field="reasoning",
    tool_id=vllm_id,
    first_delta={"role": "assistant", "content": ""},
    usage_place="include_usage",
    cached="details",
    context_window=32_768,
    counts_completion=True,
    context_error=_vllm_context,
    errors={
        "auth": (401, body({"error": "Unauthorized"}), {}),
        "rate_limit": (
            503,
            openai_style("Service Unavailable: the request queue is full", "ServiceUnavailableError", 503),
            {},
        ),
        "overloaded": (
            503,
            openai_style("Service Unavailable: the request queue is full", "ServiceUnavailableError", 503),
            {},
        ),
        "server": (500, openai_style("EngineCore encountered an issue.", "InternalServerError", 500), {}),
    },
)


# ----- SGLang ------------------------------------------------------------------------------------
# Sources: sglang srt/entrypoints/openai/protocol.py (ErrorResponse with top-level "object": "error",
# message, type, param, code; ChatMessage.reasoning_content), serving_chat.py (tool ids
# "call_<uuid hex[:24]>", usage chunk with choices [] when include_usage), managers/tokenizer_manager.py
# (_validate_token_len: "The input (N tokens) is longer than the model's context length (W tokens)."
# when the prompt alone is too long, else "Requested token count exceeds the model's maximum context
# length of W tokens. You requested a total of …" for prompt + max_new_tokens).  401 from --api-key.
def _sglang_context(p: int, c: int, w: int) -> ErrorReply:
    if p >= w:
        msg = f"The input ({p} tokens) is longer than the model's context length ({w} tokens)."
    else:
        msg = (
            f"Requested token count exceeds the model's maximum context length of {w} tokens. "
            f"You requested a total of {p + c} tokens: {p} tokens from the input messages and {c} tokens "
            "for the completion. Please reduce the number of tokens in the input messages or the "
            "completion to fit within the limit."
        )
    return ErrorReply(
        400, body=body({"object": "error", "message": msg, "type": "BadRequestError", "param": None, "code": 400})
    )


SGLANG = Dialect(
    name="sglang",
    discovery="sglang",
    source="sgl-project/sglang srt/entrypoints/openai protocol.py, serving_chat.py; tokenizer_manager.py",
    reasoning_field="reasoning_content",
    tool_id=sglang_id,
    first_delta={"role": "assistant", "content": ""},
    usage_place="include_usage",
    cached="details",
    context_window=32_768,
    counts_completion=True,
    context_error=_sglang_context,
    errors={
        "auth": (401, body({"error": "Unauthorized"}), {}),
        "rate_limit": (
            429,
            body(
                {
                    "object": "error",
                    "message": "Too many requests",
                    "type": "TooManyRequests",
                    "param": None,
                    "code": 429,
                }
            ),
            {},
        ),
        "overloaded": (
            503,
            body(
                {
                    "object": "error",
                    "message": "Server is busy",
                    "type": "ServiceUnavailable",
                    "param": None,
                    "code": 503,
                }
            ),
            {},
        ),
        "server": (
            500,
            body(
                {
                    "object": "error",
                    "message": "Internal server error",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                }
            ),
            {},
        ),
    },
)

# ----- llama.cpp ---------------------------------------------------------------------------------
# Sources: the recordings in tests/fixtures/streams/llamacpp (content: null first chunk, usage chunk
# with choices [] and "timings" on every stream, system_fingerprint "b0-unknown", the exact
# exceed_context_size_error body); tools/server/server-common (error types authentication_error,
# unavailable_error; gen_tool_call_id: 32 random alphanumerics).
LLAMACPP = Dialect(
    name="llamacpp",
    discovery="llamacpp",
    source="recordings tests/fixtures/streams/llamacpp; llama.cpp tools/server",
    reasoning_field="reasoning_content",
    tool_id=llamacpp_id,
    first_delta={"role": "assistant", "content": None},
    usage_place="always",
    cached="details",
    context_window=32_768,
    extra={"system_fingerprint": "b0-unknown"},
    timings=True,
    context_error=lambda p, c, w: ErrorReply(
        400,
        body=body(
            {
                "error": {
                    "code": 400,
                    "message": f"request ({p} tokens) exceeds the available context size ({w} tokens), "
                    "try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": p,
                    "n_ctx": w,
                }
            }
        ),
        headers={"Server": "llama.cpp", "Content-Type": "application/json; charset=utf-8"},
    ),
    errors={
        "auth": (
            401,
            body({"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}),
            {"Server": "llama.cpp"},
        ),
        "rate_limit": (
            503,
            body({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}),
            {"Server": "llama.cpp"},
        ),
        "overloaded": (
            503,
            body({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}),
            {"Server": "llama.cpp"},
        ),
        "server": (
            500,
            body({"error": {"code": 500, "message": "Internal Server Error", "type": "server_error"}}),
            {"Server": "llama.cpp"},
        ),
    },
)

# ----- Ollama ------------------------------------------------------------------------------------
# Sources: ollama openai/openai.go (chunks carry role in every delta, system_fingerprint "fp_ollama",
# tool calls whole with ids from toolCallId(): "call_" + 8 of [a-z0-9] (server/routes.go, openai.go),
# `reasoning` for thinking models, usage chunk only with include_usage, errors {"error": {message,
# type: "api_error", param, code}}); ollama issues #4967 / #3839: a prompt over num_ctx is truncated
# silently (no error), so `truncates=True`.
OLLAMA = Dialect(
    name="ollama",
    discovery="ollama",
    source="ollama openai/openai.go; ollama issues #4967, #3839 (silent truncation)",
    reasoning_field="reasoning",
    tool_id=ollama_id,
    first_delta=None,
    role_every_delta=True,
    usage_place="include_usage",
    cached="none",
    context_window=4_096,
    truncates=True,
    tool_calls_whole=True,
    extra={"system_fingerprint": "fp_ollama"},
    context_error=lambda p, c, w: ErrorReply(
        400, body=openai_style("the input length exceeds the context length", "api_error", None)
    ),
    errors={
        "auth": (401, openai_style("unauthorized", "api_error", None), {}),
        "rate_limit": (
            503,
            openai_style("server busy, please try again.  maximum pending requests exceeded", "api_error", None),
            {},
        ),
        "overloaded": (
            503,
            openai_style("server busy, please try again.  maximum pending requests exceeded", "api_error", None),
            {},
        ),
        "server": (500, openai_style("llama runner process has terminated: exit status 2", "api_error", None), {}),
    },
)


# Ollama versions whose /v1 endpoint refuses instead of truncating (ollama/ollama#16712, as cited by
# tests/llm/test_overflow.py): 400 api_error whose message is the llama.cpp runner's own JSON error.
def _ollama_refusal(p: int, c: int, w: int) -> ErrorReply:
    inner = LLAMACPP.context(p, 0, w).body_bytes().decode()
    return ErrorReply(400, body=openai_style(inner, "api_error", None))


OLLAMA_REFUSES = dataclasses.replace(
    OLLAMA,
    name="ollama-refuses",
    source=OLLAMA.source + "; ollama/ollama#16712 (refusal with the runner's error nested)",
    truncates=False,
    context_error=_ollama_refusal,
)

# ----- OpenRouter --------------------------------------------------------------------------------
# Sources: openrouter.ai/docs (api-reference streaming: ": OPENROUTER PROCESSING" comments;
# use-cases/reasoning-tokens: delta.reasoning + reasoning_details; usage-accounting: usage with cost
# in the last chunk; errors: {"error": {code, message, metadata}}); the context wording as quoted by
# client code handling it ("This endpoint's maximum context length is N tokens. However, you
# requested about M tokens … middle-out").
OPENROUTER = Dialect(
    name="openrouter",
    discovery="openrouter",
    source="openrouter.ai/docs (streaming, reasoning-tokens, usage-accounting, errors)",
    reasoning_field="reasoning",
    reasoning_details=True,
    tool_id=openai_id,
    first_delta={"role": "assistant", "content": ""},
    usage_place="always",
    cached="details",
    context_window=131_072,
    counts_completion=True,
    keepalive=b": OPENROUTER PROCESSING\n\n",
    context_error=lambda p, c, w: ErrorReply(
        400,
        body=body(
            {
                "error": {
                    "message": f"This endpoint's maximum context length is {w} tokens. However, you requested "
                    f"about {p + c} tokens ({p} of text input, {c} in the output). Please reduce the length of "
                    'either one, or use the "middle-out" transform to compress your prompt automatically.',
                    "code": 400,
                    "metadata": {"provider_name": None},
                }
            }
        ),
    ),
    errors={
        "auth": (401, body({"error": {"message": "No auth credentials found", "code": 401}}), {}),
        "rate_limit": (
            429,
            body({"error": {"message": "Rate limit exceeded: free-models-per-min.", "code": 429, "metadata": {}}}),
            _RETRY,
        ),
        "overloaded": (
            502,
            body({"error": {"message": "Provider returned error", "code": 502, "metadata": {"provider_name": "Fake"}}}),
            {},
        ),
        "server": (500, body({"error": {"message": "Internal Server Error", "code": 500}}), {}),
    },
)

# ----- DeepSeek ----------------------------------------------------------------------------------
# Sources: api-docs.deepseek.com (thinking_mode guide: reasoning_content; kv-cache guide:
# prompt_cache_hit_tokens / prompt_cache_miss_tokens; error-codes: 400/401/402/422/429/500/503 with
# "Authentication Fails", "Rate Limit Reached", "Server Overloaded"); the context wording is the
# OpenAI-compatible "you requested N tokens (M in the messages, K in the completion)".
DEEPSEEK = Dialect(
    name="deepseek",
    discovery="deepseek",
    source="api-docs.deepseek.com (thinking_mode, kv_cache, error_codes)",
    reasoning_field="reasoning_content",
    tool_id=deepseek_id,
    first_delta={"role": "assistant", "content": ""},
    usage_place="include_usage",
    cached="deepseek",
    context_window=131_072,
    counts_completion=True,
    extra={"system_fingerprint": "fp_fake_prod0820_fp8_kvcache"},
    context_error=lambda p, c, w: ErrorReply(
        400, body=openai_style(max_ctx_requested(p, c, w), "invalid_request_error", "invalid_request_error")
    ),
    errors={
        "auth": (
            401,
            openai_style(
                "Authentication Fails, Your api key: ****1234 is invalid",
                "authentication_error",
                "invalid_request_error",
            ),
            {},
        ),
        "rate_limit": (429, openai_style("Rate Limit Reached", "rate_limit_error", "rate_limit_reached"), _RETRY),
        "overloaded": (503, openai_style("Server Overloaded", "service_unavailable_error", "server_overloaded"), {}),
        "server": (500, openai_style("Server Error", "api_error", "server_error"), {}),
    },
)

# ----- LiteLLM proxy -----------------------------------------------------------------------------
# Sources: the recordings in tests/fixtures/streams/litellm (role-only first chunk, no finish_reason
# key on content chunks, usage chunk with choices [{"index": 0, "delta": {}}]); litellm
# proxy/_types.py ProxyException ({"error": {message, type, param, code: "<status>"}}) and
# exceptions.py (ContextWindowExceededError message prefixes).
LITELLM = Dialect(
    name="litellm",
    discovery="litellm",
    source="recordings tests/fixtures/streams/litellm; BerriAI/litellm proxy/_types.py, exceptions.py",
    reasoning_field="reasoning_content",
    tool_id=openai_id,
    first_delta={"role": "assistant"},
    usage_place="include_usage",
    usage_chunk_choice=True,
    finish_has_null_fields=False,
    cached="details",
    context_window=131_072,
    extra={"system_fingerprint": "b0-unknown"},
    context_error=lambda p, c, w: ErrorReply(
        400,
        body=openai_style(
            "litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: "
            f"OpenAIException - {max_ctx_requested(p, c, w)}",
            None,  # type: ignore[arg-type]
            "400",
            None,
        ),
    ),
    errors={
        "auth": (
            401,
            openai_style(
                "Authentication Error, Invalid proxy server token passed. Received API Key = sk-...1234",
                "auth_error",
                "401",
                "None",
            ),
            {},
        ),
        "rate_limit": (
            429,
            openai_style("litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached", "None", "429"),
            {"llm_provider-retry-after": "1"},  # LiteLLM's own limiter sends only this (60 s in the field)
        ),
        "overloaded": (
            503,
            openai_style("litellm.ServiceUnavailableError: OpenAIException - Service Unavailable", "None", "503"),
            {},
        ),
        "server": (
            500,
            openai_style("litellm.InternalServerError: OpenAIException - Internal Server Error", "None", "500"),
            {},
        ),
    },
)

# ----- kimicode (the fake's historic shape, kept as the default) -------------------------------------
DEFAULT = Dialect(
    name="kimicode",
    source="kimicode's original fake server (Moonshot-like; usage chunk only with include_usage)",
    reasoning_field="reasoning_content",
    tool_id=kimi_id,
    first_delta={"role": "assistant", "content": ""},
    usage_place="include_usage",
    usage_null=True,
    cached="both",
    context_window=262_144,
    context_error=MOONSHOT.context_error,
    errors=MOONSHOT.errors,
)

DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (DEFAULT, MOONSHOT, OPENAI, VLLM, SGLANG, LLAMACPP, OLLAMA, OLLAMA_REFUSES, OPENROUTER, DEEPSEEK, LITELLM)
}
"""Every dialect by name; ``kimicode`` is the default shape of `FakeServer`."""


def get_dialect(dialect: str | Dialect) -> Dialect:
    """The `Dialect` named `dialect` (or `dialect` itself); a clear error for an unknown name."""
    if isinstance(dialect, Dialect):
        return dialect
    if not isinstance(dialect, str) or dialect not in DIALECTS:
        raise ValueError(f"unknown FakeServer dialect {dialect!r}; known: {', '.join(sorted(DIALECTS))}")
    return DIALECTS[dialect]
