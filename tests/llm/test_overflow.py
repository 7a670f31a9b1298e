"""Context-length errors of every major server: recognised, and their numbers read (kimicode.llm.overflow).

Each fixture is an error body as the server sends it, with where the wording comes from. The table is
run twice: through `context_overflow` directly and through the real client against a local HTTP server
(the wire is the contract). Hostile cases: look-alike errors that must NOT be taken for an overflow.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from helpers import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from kimicode.llm.client import ChatClient, ClientConfig
from kimicode.llm.errors import LLMError, classify_status
from kimicode.llm.overflow import context_overflow
from kimicode.testing import ErrorReply, FakeServer

STREAMS = FIXTURES / "streams" / "llamacpp"  # copies of shared/reference/streams
_LLAMA_BODY = (
    '{"error":{"code":400,"message":"request (6031 tokens) exceeds the available context size (4096 tokens), '
    'try increasing it","type":"exceed_context_size_error","n_prompt_tokens":6031,"n_ctx":4096}}'
)


def _err(message: str, type_: Any = None, code: Any = None, **extra: Any) -> dict[str, Any]:
    err: dict[str, Any] = {"message": message, "type": type_, "param": None, "code": code}
    err.update(extra)
    return {"error": err}


# (name, source, status, body, window, prompt tokens, completion tokens)
CASES: list[tuple[str, str, int, Any, int | None, int | None, int | None]] = [
    (
        "llamacpp",
        "recorded from llama-server (shared/reference/streams/llamacpp/context-error.body.json)",
        400,
        json.loads(_LLAMA_BODY),
        4096,
        6031,
        None,
    ),
    (
        "llamacpp-old",
        "llama.cpp server before exceed_context_size_error (tools/server/server.cpp, 2024)",
        400,
        _err(
            "the request exceeds the available context size, try increasing the context size or enable context shift",
            "invalid_request_error",
            400,
        ),
        None,
        None,
        None,
    ),
    (
        "moonshot",
        "platform.moonshot.ai error reference; MoonshotAI/kimi-cli issue #2011",
        400,
        _err(
            "Invalid request: Your request exceeded model token limit: 262144 (requested: 269030)",
            "invalid_request_error",
        ),
        262_144,
        None,
        None,
    ),
    (
        "moonshot-short",
        "platform.kimi.ai/docs/api/errors",
        400,
        _err("Input token length too long", "invalid_request_error"),
        None,
        None,
        None,
    ),
    (
        "openai",
        "OpenAI chat completions, code context_length_exceeded (openai-cookbook, community reports)",
        400,
        _err(
            "This model's maximum context length is 128000 tokens. However, your messages resulted in "
            "130512 tokens. Please reduce the length of the messages.",
            "invalid_request_error",
            "context_length_exceeded",
            param="messages",
        ),
        128_000,
        130_512,
        None,
    ),
    (
        "openai-new",
        "OpenAI, newer wording without numbers (code context_length_exceeded)",
        400,
        _err(
            "Your input exceeds the context window of this model. Please adjust your input and try again.",
            "invalid_request_error",
            "context_length_exceeded",
        ),
        None,
        None,
        None,
    ),
    (
        "azure",
        "Azure OpenAI (learn.microsoft.com troubleshooting, context_length_exceeded)",
        400,
        _err(
            "This model's maximum context length is 8192 tokens, however you requested 8501 tokens (7477 in your "
            "prompt; 1024 for the completion). Please reduce your prompt; or completion length.",
            "invalid_request_error",
            "context_length_exceeded",
        ),
        8192,
        7477,
        1024,
    ),
    (
        "vllm-old",
        "vLLM serving_engine._validate_input (<= v0.6), top-level object:error body",
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you requested "
            "5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or "
            "completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        4096,
        4000,
        1000,
    ),
    (
        "vllm-input",
        "vLLM serving_engine (v0.8+): input alone over max_model_len",
        400,
        _err(
            "This model's maximum context length is 262144 tokens. However, your request has 372027 input tokens. "
            "Please reduce the length of the input messages. None",
            "BadRequestError",
            400,
        ),
        262_144,
        372_027,
        None,
    ),
    (
        "vllm-total",
        "vLLM (v0.10+): prompt plus output tokens over max_model_len",
        400,
        _err(
            "This model's maximum context length is 32768 tokens. However, you requested 4096 output tokens and "
            "your prompt contains at least 30000 input tokens, for a total of at least 34096 tokens. Please reduce "
            "the length of the input prompt or the number of requested output tokens.",
            "BadRequestError",
            400,
        ),
        32_768,
        30_000,
        4096,
    ),
    (
        "vllm-max-tokens",
        "vLLM: max_tokens larger than what the window leaves",
        400,
        _err(
            "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length is "
            "4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None",
            "BadRequestError",
            400,
        ),
        4096,
        2778,
        8000,
    ),
    (
        "sglang",
        "SGLang openai_api adapter (sgl-project/sglang, serving_chat / adapter.py)",
        400,
        {
            "object": "error",
            "message": "Requested token count exceeds the model's maximum context length of 65536 "
            "tokens. You requested a total of 67298 tokens: 50914 tokens from the input messages and 16384 tokens for "
            "the completion. Please reduce the number of tokens in the input messages or the completion to fit within "
            "the limit.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        65_536,
        50_914,
        16_384,
    ),
    (
        "sglang-input",
        "SGLang tokenizer_manager: input longer than context_len",
        400,
        {
            "object": "error",
            "message": "The input (9000 tokens) is longer than the model's context length (8192 tokens).",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        8192,
        9000,
        None,
    ),
    (
        "ollama",
        "Ollama /v1 after ollama/ollama#16712: the runner's llama.cpp error nested in the message",
        400,
        _err(
            '{"error":{"code":400,"message":"request (351 tokens) exceeds the available context size (256 tokens),'
            ' try increasing it","type":"exceed_context_size_error","n_prompt_tokens":351,"n_ctx":256}}',
            "api_error",
        ),
        256,
        351,
        None,
    ),
    (
        "ollama-embed",
        "Ollama llm/server.go",
        500,
        {"error": "the input length exceeds the context length"},
        None,
        None,
        None,
    ),
    (
        "lmstudio",
        "LM Studio 0.3.x (lmstudio-bug-tracker #546, cline #3664): {'error': text}",
        400,
        {
            "error": "Trying to keep the first 10136 tokens when context the overflows. However, the model is loaded "
            "with context length of only 7866 tokens, which is not enough. Try to load the model with a larger "
            "context length, or provide a shorter input"
        },
        7866,
        10_136,
        None,
    ),
    (
        "lmstudio-midgen",
        "LM Studio (lmstudio-bug-tracker #1251)",
        400,
        {
            "error": "Reached context length of 4096 tokens with model (arch: qwen3vlmoe) that does not currently "
            "support mid-generation context overflow. Try reloading with a larger context length or shortening the "
            "prompt/chat."
        },
        4096,
        None,
        None,
    ),
    (
        "openrouter",
        "OpenRouter (numeric code 400, metadata)",
        400,
        {
            "error": {
                "message": "This endpoint's maximum context length is 16384 tokens. However, you requested "
                "about 26265 tokens (26255 of text input, 10 in the output). Please reduce the length of either one, "
                "or use the context-compression plugin to compress your prompt automatically.",
                "code": 400,
                "metadata": {"provider_name": None},
            }
        },
        16_384,
        26_255,
        10,
    ),
    (
        "openrouter-tools",
        "OpenRouter with tool input counted apart",
        400,
        _err(
            "This endpoint's maximum context length is 65536 tokens. However, you requested about 65810 tokens "
            "(1430 of text input, 380 of tool input, 64000 in the output). Please reduce the length of either one.",
            None,
            400,
        ),
        65_536,
        1810,
        64_000,
    ),
    (
        "deepseek",
        "api-docs.deepseek.com error codes (invalid_request_error)",
        400,
        _err(
            "This model's maximum context length is 131072 tokens. However, you requested 140000 tokens (135000 in "
            "the messages, 5000 in the completion). Please reduce the length of the messages or completion.",
            "invalid_request_error",
            "invalid_request_error",
        ),
        131_072,
        135_000,
        5000,
    ),
    (
        "litellm",
        "LiteLLM proxy (litellm.ContextWindowExceededError wrapping hosted_vllm, code as string)",
        400,
        _err(
            "litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: "
            "Hosted_vllmException - This model's maximum context length is 40960 tokens. However, you requested "
            "2048 output tokens and your prompt contains at least 39000 input tokens, for a total of at least 41048 "
            "tokens.",
            None,
            "400",
        ),
        40_960,
        39_000,
        2048,
    ),
    (
        "litellm-lmstudio",
        "LiteLLM proxy in front of LM Studio's llama.cpp engine (nested, escaped JSON)",
        400,
        _err(
            "litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: "
            "Lm_studioException - Error code: 400 - {'error': 'Engine protocol predict request returned 400: "
            '{"error":{"code":400,"message":"request (19389 tokens) exceeds the available context size (16384 '
            'tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":19389,"n_ctx":16384}}'
            "'}",
            None,
            "400",
        ),
        16_384,
        19_389,
        None,
    ),
    (
        "litellm-bare",
        "LiteLLM: no numbers, type ContextWindowExceededError",
        400,
        _err("context window exceeded", "ContextWindowExceededError", "400"),
        None,
        None,
        None,
    ),
    (
        "together",
        "Together AI",
        400,
        _err(
            "The input (516368 tokens) is longer than the model's context length (262144 tokens).",
            "invalid_request_error",
        ),
        262_144,
        516_368,
        None,
    ),
    (
        "tgi",
        "Hugging Face TGI (422 validation; Together/Fireworks-era dedicated endpoints)",
        422,
        {
            "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8192. Given: 8000 `inputs` "
            "tokens and 1000 `max_new_tokens`",
            "error_type": "validation",
        },
        8192,
        8000,
        1000,
    ),
    (
        "fireworks",
        "Fireworks / Anthropic-compatible wording",
        400,
        _err("prompt is too long: 213462 tokens > 200000 maximum", "invalid_request_error"),
        200_000,
        213_462,
        None,
    ),
    (
        "mistral",
        "Mistral La Plateforme",
        400,
        {
            "object": "error",
            "message": "Prompt contains 40000 tokens and 0 draft tokens, too large for model with "
            "32768 maximum context length",
            "type": "invalid_request_error",
            "code": None,
        },
        32_768,
        40_000,
        None,
    ),
    (
        "gemini",
        "Gemini OpenAI-compatible endpoint",
        400,
        [
            {
                "error": {
                    "code": 400,
                    "message": "The input token count (1196265) exceeds the maximum number of tokens "
                    "allowed (1048576).",
                    "status": "INVALID_ARGUMENT",
                }
            }
        ],
        1_048_576,
        1_196_265,
        None,
    ),
    (
        "groq",
        "Groq (code context_length_exceeded, no numbers)",
        400,
        _err(
            "Please reduce the length of the messages or completion.",
            "invalid_request_error",
            "context_length_exceeded",
        ),
        None,
        None,
        None,
    ),
    (
        "vllm-500",
        "a gateway that turns the upstream overflow into a 500: must not be retried as transient",
        500,
        _err(
            "This model's maximum context length is 8192 tokens. However, your request has 9000 input tokens.",
            "InternalServerError",
        ),
        8192,
        9000,
        None,
    ),
]


def _fields(body: Any) -> tuple[str, str | None, Any]:
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        return str(err.get("message") or ""), err.get("type"), err.get("code")
    if isinstance(err, list):
        return json.dumps(err), None, None
    return str(err), None, None


@pytest.mark.parametrize(
    ("name", "source", "status", "body", "window", "prompt", "completion"), CASES, ids=[c[0] for c in CASES]
)
def test_every_server_wording_is_recognised_with_its_numbers(
    name: str, source: str, status: int, body: Any, window: int | None, prompt: int | None, completion: int | None
) -> None:
    message, type_, code = _fields(body)
    found = context_overflow(status, message, type_, code=code, body=body)
    assert found is not None, f"{name} ({source}) not recognised"
    assert found.window == window
    assert found.prompt_tokens == prompt
    assert found.completion_tokens == completion
    err = classify_status(status, message, type_, {}, code=code, body=body)
    assert err.kind == "context_length" and err.overflow == found


def test_the_recorded_llamacpp_body_matches_the_fixture() -> None:
    path = STREAMS / "context-error.body.json"
    assert json.loads(path.read_text()) == json.loads(_LLAMA_BODY)


def test_moonshot_total_counts_the_completion_reserve() -> None:
    found = context_overflow(400, "Your request exceeded model token limit: 262144 (requested: 269030)")
    assert found is not None and found.total_tokens == 269_030
    assert found.prompt_estimate(32_768) == 269_030 - 32_768
    assert found.prompt_estimate(None) is None


def test_vllm_max_tokens_too_large_is_flagged() -> None:
    message = _fields(CASES[10][3])[0]
    found = context_overflow(400, message)
    assert found is not None and found.completion_too_large
    plain = context_overflow(400, _fields(CASES[8][3])[0])
    assert plain is not None and not plain.completion_too_large


NOT_OVERFLOW: list[tuple[int, str, str | None, Any]] = [
    (429, "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Requested 50000.", "tokens", None),
    (400, "Throttling error: Too many tokens, please wait before trying again.", None, None),
    (429, "This model's maximum context length is 8192 tokens", None, None),  # a 429 is a rate limit, always
    (401, "maximum context length", "invalid_authentication_error", None),
    (400, "unrecognized request argument supplied: top_k", "invalid_request_error", None),
    (400, "Invalid schema for function 'bash': context is not allowed", "invalid_request_error", None),
    (400, "max_tokens must be at least 1, got 0.", "BadRequestError", None),
    (
        400,
        "thinking is enabled but reasoning_content is missing in assistant tool call message at index 3",
        "invalid_request_error",
        None,
    ),
    (404, "The model `qwen-128k` does not exist", "NotFoundError", None),
    (413, "Request Entity Too Large", None, None),
    (500, "CUDA out of memory. Tried to allocate 2.00 GiB (context 4096)", None, None),
]


@pytest.mark.parametrize(("status", "message", "type_", "code"), NOT_OVERFLOW)
def test_look_alike_errors_are_not_overflows(status: int, message: str, type_: str | None, code: Any) -> None:
    assert context_overflow(status, message, type_, code=code) is None
    assert classify_status(status, message, type_, {}).kind != "context_length"


def test_garbage_bodies_do_not_crash() -> None:
    for body in (
        None,
        [],
        {},
        "x",
        {"error": None},
        {"error": {"message": None}},
        {"error": [1, {"n_ctx": "x"}]},
        {"error": "{not json}"},
        {"n_ctx": True},
        "{" * 5000 + "}" * 5000,
    ):
        context_overflow(400, str(body), body=body)
    deep: Any = "prompt is too long"
    for _ in range(200):
        deep = {"error": deep}
    assert context_overflow(400, "", body=deep) is None  # depth-bounded: no RecursionError, nothing found
    huge = context_overflow(400, "maximum context length is 99999999999999999999 tokens")
    assert huge is not None and huge.window is None  # absurd numbers are not believed


# -- through the client, on the wire --------------------------------------------------------------


async def _fail(server: FakeServer) -> LLMError:
    client = ChatClient(
        ClientConfig(base_url=server.base_url, api_key="k", model="m", max_retries=2, retry_base_delay=0.01)
    )
    try:
        async for _ in client.stream([{"role": "user", "content": "hi"}]):
            pass
    except LLMError as err:
        return err
    finally:
        await client.aclose()
    raise AssertionError("no error raised")


@pytest.mark.parametrize(
    ("name", "status", "body", "window", "prompt"),
    [(c[0], c[2], c[3], c[4], c[5]) for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_every_wording_is_recognised_through_the_client(
    name: str, status: int, body: Any, window: int | None, prompt: int | None
) -> None:
    with FakeServer([ErrorReply(status, body=json.dumps(body))]) as server:
        err = asyncio.run(_fail(server))
        assert err.kind == "context_length", (name, err.message)
        assert err.overflow is not None
        assert (err.overflow.window, err.overflow.prompt_tokens) == (window, prompt)
        assert len(server.requests) == 1  # never retried as if the server were overloaded


def test_an_overflow_sent_inside_a_200_stream_is_recognised() -> None:
    """LM Studio reports some overflows as an error event in a 200 stream."""
    text = (
        "Trying to keep the first 5000 tokens when context the overflows. However, the model is loaded with "
        "context length of only 4096 tokens, which is not enough."
    )
    raw = "data: " + json.dumps({"error": text}) + "\n\n"
    with FakeServer([ErrorReply(200, body=raw, headers={"Content-Type": "text/event-stream"})]) as server:
        err = asyncio.run(_fail(server))
    assert err.kind == "context_length"
    assert err.overflow is not None and err.overflow.window == 4096


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["error", "message", "n_ctx", "n_prompt_tokens", "code", "type", "x"]), children, max_size=4
        )
    ),
    max_leaves=20,
)


@pytest.mark.prepush
@settings(max_examples=150, deadline=None)
@given(status=st.sampled_from([None, 400, 413, 422, 429, 500]), message=st.text(max_size=300), body=_json)
def test_any_body_is_classified_without_raising(status: int | None, message: str, body: Any) -> None:
    found = context_overflow(status, message, body=body)
    if found is not None:
        for n in (found.window, found.prompt_tokens, found.completion_tokens, found.total_tokens):
            assert n is None or (isinstance(n, int) and n > 0)
    if status == 429:
        assert found is None
