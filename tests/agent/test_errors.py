"""One error hierarchy: every deliberate error is a `kimicode.KimicodeError`, old names and bases keep
working, model failures carry their HTTP status and retry-after into `RunResult.error`, and
`raise_for_status()` raises the matching class."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable
from typing import Any

import pytest

import kimicode
from kimicode import Agent, ErrorInfo, KimicodeError
from kimicode.llm.errors import LLMError, classify_status
from kimicode.testing import ErrorReply, FakeServer, Reply, ToolCall

MakeAgent = Callable[..., Agent]


def test_old_names_are_the_new_classes_and_keep_their_bases() -> None:
    from kimicode.config.endpoint import ConfigError
    from kimicode.context.tokens import TokenizerError
    from kimicode.session.store import SessionError
    from kimicode.tools.base import ToolError
    from kimicode.tools.patch import PatchError

    assert issubclass(ConfigError, kimicode.ConfigError) and SessionError is kimicode.SessionError
    assert ToolError is kimicode.ToolError and issubclass(LLMError, kimicode.ModelError)
    for cls in (ConfigError, SessionError, ToolError, LLMError, TokenizerError, PatchError, kimicode.UsageError):
        assert issubclass(cls, KimicodeError), cls
    assert issubclass(SessionError, ValueError)  # `except ValueError` still catches an unknown session id
    assert issubclass(TokenizerError, ValueError)
    assert issubclass(kimicode.UsageError, RuntimeError)  # "a turn is already running" was a RuntimeError


@pytest.mark.parametrize(
    ("status", "message", "headers", "cls", "kind"),
    [
        (401, "bad key", {}, kimicode.AuthError, "auth"),
        (403, "forbidden", {}, kimicode.AuthError, "auth"),
        (429, "slow down", {"retry-after": "7"}, kimicode.RateLimitError, "transient"),
        (429, "insufficient balance", {}, kimicode.QuotaError, "quota"),
        (400, "maximum context length is 8192 tokens", {}, kimicode.ContextLengthError, "context_length"),
        (400, "messages: bad role", {}, kimicode.BadRequestError, "bad_request"),
        (503, "overloaded", {"retry-after-ms": "1500"}, kimicode.ServerUnavailableError, "transient"),
    ],
)
def test_classified_errors_are_catchable_by_class(
    status: int, message: str, headers: dict[str, str], cls: type[Exception], kind: str
) -> None:
    err = classify_status(status, message, None, headers)
    assert isinstance(err, cls) and isinstance(err, LLMError) and isinstance(err, KimicodeError)
    assert err.kind == kind and err.status == status
    clone = pickle.loads(pickle.dumps(err))  # crosses a process pool intact
    assert type(clone) is type(err) and clone.message == err.message and clone.retry_after == err.retry_after


def test_model_error_with_a_kind_nobody_knows_is_still_a_model_error() -> None:
    err = LLMError("what", "something_new")  # a kind added later must not break construction
    assert type(err) is LLMError and isinstance(err, kimicode.ModelError) and str(err) == "what"
    assert isinstance(LLMError("down", "transient"), kimicode.ServerUnavailableError)  # no status: network
    assert type(kimicode.ModelError("no", "auth", 401)) is kimicode.AuthError  # the base class dispatches too
    assert isinstance(LLMError("x", "auth", 401), kimicode.AuthError)
    assert type(LLMError("x", "auth")).__name__ == "AuthError"


def test_error_info_is_the_string_it_always_was() -> None:
    info = ErrorInfo("HTTP 429: slow", "transient", 429, 2.5)
    assert info == "HTTP 429: slow" and "slow" in info and info.message == "HTTP 429: slow"
    assert json.dumps({"error": info}) == '{"error": "HTTP 429: slow"}'
    for clone in (copy.deepcopy(info), pickle.loads(pickle.dumps(info))):
        assert (clone, clone.kind, clone.status, clone.retry_after) == (info, "transient", 429, 2.5)
    assert isinstance(info.exception(), kimicode.RateLimitError)
    assert isinstance(ErrorInfo("boom").exception(), kimicode.TurnError)


def test_run_result_carries_status_and_retry_after(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(ErrorReply(429, "rate limited, slow down", "rate_limit_error", headers={"Retry-After": "0"}))
    server.add(ErrorReply(429, "rate limited, slow down", "rate_limit_error", headers={"Retry-After": "0"}))
    result = make_agent(max_retries=1).run_sync("hi")
    assert result.status == "error" and result.error_kind == "transient"  # as documented before
    assert isinstance(result.error, ErrorInfo)
    assert result.error.status == 429 and result.error.retry_after == 0.0 and result.error.kind == "transient"
    assert "rate limited" in result.error
    with pytest.raises(kimicode.RateLimitError) as info:
        result.raise_for_status()
    assert info.value.status == 429 and info.value.result is result  # type: ignore[attr-defined]


def test_auth_failure_raises_auth_error(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(ErrorReply(401, "Invalid Authentication", "invalid_authentication_error"))
    result = make_agent().run_sync("hi")
    assert result.error is not None and result.error.status == 401 and result.error_kind == "auth"
    with pytest.raises(kimicode.AuthError):
        result.raise_for_status()
    with pytest.raises(KimicodeError):  # the one `except` a library user needs
        result.raise_for_status()


def test_success_returns_itself_and_limits_raise_turn_error(server: FakeServer, make_agent: MakeAgent) -> None:
    server.add(Reply(content="done"))
    ok = make_agent().run_sync("hi")
    assert ok.raise_for_status() is ok and ok.error is None
    server.add(Reply(tool_calls=[ToolCall("glob", {"pattern": "*"})]), Reply(content="never"))
    limited = make_agent(max_turns=1).run_sync("hi")
    assert limited.status == "max_turns"
    with pytest.raises(kimicode.TurnError) as info:
        limited.raise_for_status()
    assert info.value.status == "max_turns" and "max_turns=1" in str(info.value)


def test_turn_usage_is_this_turn_and_usage_the_running_total(server: FakeServer, make_agent: MakeAgent) -> None:
    usage: dict[str, Any] = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    server.add(Reply(content="one", usage=usage), Reply(content="two", usage=usage))

    async def main() -> tuple[kimicode.RunResult, kimicode.RunResult]:
        agent = make_agent()
        try:
            return await agent.run("a"), await agent.run("b")
        finally:
            await agent.aclose()

    import asyncio

    first, second = asyncio.run(main())
    assert first.turn_usage["prompt_tokens"] == 100 and first.usage["prompt_tokens"] == 100
    assert second.turn_usage == {"prompt_tokens": 100, "completion_tokens": 10, "cached_tokens": 0}
    assert second.usage["prompt_tokens"] == 200 and second.usage["completion_tokens"] == 20
