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
