"""What the agent needs of a model client, as a protocol a caller's own client can implement.

`kimicode.llm.client.ChatClient` is kimicode's client (the real wire, retries, dialects); a library caller
may pass their own to `Agent(client=...)`: anything with `stream` and `aclose` below. The stream's items
are the three records defined here (light: importing this module loads no HTTP stack).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class StreamDelta:
    """Streamed text: kind is `reasoning`, `content` or `tool_arguments` (index = tool call index)."""

    kind: str
    text: str
    index: int = 0


@dataclass(frozen=True)
class StreamRetry:
    """The request failed transiently and will be retried: discard any partial output shown so far."""

    attempt: int
    max_retries: int
    delay: float
    error: str


@dataclass(frozen=True)
class Completion:
    """A finished model step: the assistant message exactly as it will be stored and sent back."""

    message: dict[str, Any]
    finish_reason: str | None
    usage: dict[str, Any] | None
    request_bytes: int = 0


StreamEvent = StreamDelta | StreamRetry | Completion


@runtime_checkable
class ModelClient(Protocol):
    """A model client the agent can drive: one streamed chat completion per call, then closed.

    `stream(messages, tools, max_completion_tokens=N)` sends the history (OpenAI chat messages, exactly
    as the agent keeps them) and the tool schemas (OpenAI `{"type": "function", ...}` dicts, possibly
    empty) and yields `StreamDelta`s as text arrives (optional: they only feed the events), `StreamRetry`
    before a retried attempt, and last exactly one `Completion` whose `message` is the assistant message
    (`role`, `content`, and `tool_calls` with `id`, `function.name` and `function.arguments` as a JSON
    string) and whose `usage` has `prompt_tokens` and `completion_tokens` when known. Raise
    `kimicode.ModelError` (or any `kimicode.llm.errors.LLMError`) for a failed request: the turn ends
    with status `error` and the history stays valid. `aclose()` releases what the client holds; the agent
    calls it from `agent.aclose()`.
    """

    def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        max_completion_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]: ...

    async def aclose(self) -> None: ...


async def checked_stream(events: Any, who: str) -> AsyncIterator[StreamEvent]:
    """A caller's client's stream, checked as it goes: anything but the three records, a `Completion` that
    is not an assistant message, or an end without one becomes an `LLMError` (kind `protocol`) naming what
    was wrong, so the turn ends with that error and a valid history instead of an internal one."""
    from kimicode.llm.errors import LLMError

    if not hasattr(events, "__aiter__"):
        raise LLMError(f"{who}.stream() must return an async iterator (write it as an `async def` generator), "
                       f"not {type(events).__name__}", "protocol")
    done = False
    async for event in events:
        if isinstance(event, Completion):
            if (problem := message_problem(event.message)) is not None:
                raise LLMError(f"{who}.stream() gave a Completion whose message {problem}", "protocol")
            done = True
        elif not isinstance(event, StreamDelta | StreamRetry):
            raise LLMError(f"{who}.stream() yielded a {type(event).__name__}; it yields StreamDelta and "
                           "StreamRetry records and last one Completion (kimicode.Completion)", "protocol")
        yield event
    if not done:
        raise LLMError(f"{who}.stream() ended without a Completion (kimicode.Completion)", "protocol")


def message_problem(message: Any) -> str | None:
    """What makes `message` unfit to be stored and sent back as an assistant message, or None: it must be
    a JSON-serialisable dict with role `assistant`, and each tool call must have a string `id`, and a
    `function` with a string `name` and its `arguments` as a JSON string."""
    import json

    if not isinstance(message, dict) or message.get("role") != "assistant":
        return f"is not an assistant message (a dict with role 'assistant'): {message!r:.200}"
    try:
        json.dumps(message)
    except (TypeError, ValueError) as exc:
        return f"is not JSON ({exc})"
    calls = message.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list):
        return "has tool_calls that are not a list"
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(call.get("id"), str):
            return f"has a tool call without a string id and a function: {call!r:.200}"
        if not isinstance(function.get("name"), str) or not isinstance(function.get("arguments"), str):
            return f"has a tool call whose function lacks a string name and arguments (a JSON string): {call!r:.200}"
    return None
