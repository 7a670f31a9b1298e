"""The OpenAI-compatible streaming client.

We use the official `openai` SDK for transport, authentication, base-URL handling and HTTP error
mapping, through its public custom-request API (`post(..., cast_to=httpx2.Response, stream=True)`), but
send the request body we serialise ourselves and read the SSE stream as plain JSON: the
SDK's typed models drop unknown fields such as `reasoning_content`, and its request transformation
walks every message on every step (costly at a million tokens). The SDK's own retries are off; the
retry policy lives here, in `ChatClient.stream`, and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import random
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx2
import openai

from kimicode.errors import out_of_descriptors
from kimicode.llm.accumulate import REASONING_FIELDS, StreamAccumulator
from kimicode.llm.errors import LLMError, classify_status, parse_retry_after
from kimicode.llm.overflow import context_overflow
from kimicode.llm.pool import LoopPool, borrow, give_back
from kimicode.llm.profiles import ModelProfile, profile_for
from kimicode.llm.protocol import Completion, StreamDelta, StreamEvent, StreamRetry
from kimicode.llm.ratelimit import slots_for


@dataclass
class ClientConfig:
    """Everything the client needs to talk to one endpoint."""

    base_url: str
    api_key: str
    model: str
    profile: ModelProfile | None = None
    effort: str | None = None
    max_completion_tokens: int | None = None
    session_id: str | None = None
    max_retries: int = 5
    retry_base_delay: float = 1.0
    retry_max_delay: float = 60.0
    timeout: float = 300.0
    """Seconds to wait for the server to answer or to send the next chunk."""
    reasoning_field: str | None = None
    """Force the name under which reasoning is sent back (else: the name the server uses)."""
    extra_headers: dict[str, str] = field(default_factory=dict)
    extra_body: dict[str, Any] = field(default_factory=dict)
    key_source: str | None = None
    """Where the API key came from (an environment variable's name, or `argument`): named in 401 errors."""
    url_source: str | None = None
    """Where the base URL came from (`--base-url`, an environment variable, a config file): named when unreachable."""
    connect_retries: int = 1
    """Retries when a server that has not answered yet cannot be reached (refused, DNS): a wrong URL fails fast."""
    retries_explicit: bool = False
    """`max_retries` was set by the user (`--max-retries`, config, library): it wins over the fail-fast rule
    for a server that has not answered yet (one starting up takes a few seconds)."""
    tool_choice: str | None = None
    """`auto`, `none`, `required`, or a tool's name (forces that tool); sent only with tools. None: not sent."""
    gate: RateGate | None = None
    """A limiter shared by many clients (kimicode batch): waited on before each request, told of each 429."""
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    """How a retry waits its delay (the backoff, or the server's retry-after): a test passes one that records the
    delay instead of waiting it."""


class RateGate(Protocol):
    """The hook a shared rate limiter offers the retry layer (see kimicode/batch/limiter.py)."""

    async def wait(self) -> None:
        """Return when a request may be sent."""

    def throttled(self, delay: float) -> None:
        """The endpoint answered 429: hold every sharer back for `delay` seconds."""


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """One TLS context for every client: loading the CA store costs ~50 ms of CPU, paid once per process
    instead of once per Agent (a batch of 200 tasks would spend 10 s of its event loop on it)."""
    import httpcore2

    return httpcore2.default_ssl_context()


_SHARED_HTTP: contextvars.ContextVar[httpx2.AsyncClient | None] = contextvars.ContextVar(
    "kimicode_shared_http", default=None
)


def new_http_client() -> httpx2.AsyncClient:
    """The connection pool a client talks through (the SDK's defaults, kimicode's shared TLS context)."""
    return openai.DefaultAsyncHttpxClient(verify=shared_ssl_context())


def share_connections(http: httpx2.AsyncClient) -> contextvars.Context:
    """A copy of the current context in which every `ChatClient` created uses the pool `http`.

    Run tasks in it (`asyncio.create_task(coro, context=ctx)`): kimicode batch gives every task of a batch
    one pool, so 200 tasks to one endpoint reuse a few warm connections instead of opening one (and a TLS
    handshake) per task. The pool only carries connections: each client sends its own key, URL and timeouts.
    Its owner closes it (clients created in the context do not); use it on one event loop only."""
    ctx = contextvars.copy_context()
    ctx.run(_SHARED_HTTP.set, http)
    return ctx


class ChatClient:
    """Streams chat completions, retries transient failures, and keeps messages byte-exact."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.profile = config.profile or profile_for(config.model)
        self.reasoning_field: str | None = config.reasoning_field
        self._shared = _SHARED_HTTP.get()  # a pool given by `share_connections` (its owner closes it)
        self._pool: LoopPool | None = None  # else the loop's pool (llm/pool.py), borrowed at the first request
        self._sdk_made: openai.AsyncOpenAI | None = None
        self._encoded: dict[int, tuple[dict[str, Any], bytes]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.reached = False
        """True once the server has answered: after that a refused connection is a restart, retried as usual."""

    def usable_here(self) -> bool:
        """False when this client's pooled connections belong to another event loop (`asyncio.run` called
        again by a script): they cannot be used or closed from this one, so the caller builds a new client."""
        loop = self._loop
        return loop is None or (loop is asyncio.get_running_loop() and not loop.is_closed())

    @property
    def _sdk(self) -> openai.AsyncOpenAI:
        """The SDK client on this loop's pool (made at the first request, and again after `aclose()` or on
        another event loop: a client wrapped by the caller works for every `run_sync`)."""
        if self._sdk_made is None or not self.usable_here():
            self._pool = None  # another loop's pool is not ours to give back from here
            http = self._shared
            if http is None:
                self._pool = borrow(new_http_client)
                http = self._pool.http
            self._loop = asyncio.get_running_loop()
            self._sdk_made = openai.AsyncOpenAI(
                api_key=self.config.api_key,
                base_url=self.config.base_url,
                max_retries=0,
                timeout=httpx2.Timeout(self.config.timeout, connect=min(15.0, self.config.timeout)),
                http_client=http,
            )
        return self._sdk_made

    async def aclose(self) -> None:
        """Give back the loop's pool (the last client closes it; one given by `share_connections` is left to
        its owner). The client can be used again afterwards, on this loop or another.

        Connections opened on another, possibly closed, event loop are dropped, not closed: closing them
        would schedule callbacks on that loop."""
        pool, self._pool, self._sdk_made = self._pool, None, None
        if pool is not None and self.usable_here():
            await give_back(pool)
        self._loop = None

    # -- request building -------------------------------------------------------------------------

    def _wire_message(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The message as sent: reasoning renamed to the server's field name when they differ."""
        want = self.reasoning_field
        if want and msg.get("role") == "assistant":
            for name in REASONING_FIELDS:
                if name != want and name in msg:
                    renamed = {(want if k == name else k): v for k, v in msg.items()}
                    return renamed
        return msg

    def _encode_each(self, messages: Sequence[dict[str, Any]]) -> list[bytes]:
        cache = self._encoded
        fresh: dict[int, tuple[dict[str, Any], bytes]] = {}
        parts: list[bytes] = []
        for msg in messages:
            key = id(msg)
            hit = cache.get(key)
            if hit is None or hit[0] is not msg:
                wire = self._wire_message(msg)
                hit = (msg, json.dumps(wire, ensure_ascii=False, separators=(",", ":")).encode())
            fresh[key] = hit
            parts.append(hit[1])
        self._encoded = fresh
        return parts

    def body_pieces(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        max_completion_tokens: int | None = None,
    ) -> list[bytes]:
        """The request body as pieces in order (head, each cached message, separators).

        The body is streamed from these pieces in ~256 KB chunks, so a 4 MB history is never copied
        into one more 4 MB buffer (nor into the transport's send buffers) on every step.
        """
        cfg = self.config
        head: dict[str, Any] = {"model": cfg.model, "stream": True, "stream_options": {"include_usage": True}}
        head["max_completion_tokens"] = (
            max_completion_tokens or cfg.max_completion_tokens or self.profile.max_completion_tokens
        )
        head.update(self.profile.request_params(cfg.effort))
        if cfg.session_id:
            head["prompt_cache_key"] = cfg.session_id
        if tools:
            head["tools"] = list(tools)
            if cfg.tool_choice:
                head["tool_choice"] = tool_choice_value(cfg.tool_choice)
        head.update(cfg.extra_body)
        head_json = json.dumps(head, ensure_ascii=False, separators=(",", ":")).encode()
        pieces = [head_json[:-1] + b',"messages":[']
        for i, encoded in enumerate(self._encode_each(messages)):
            if i:
                pieces.append(b",")
            pieces.append(encoded)
        pieces.append(b"]}")
        return pieces

    # -- streaming with retries -------------------------------------------------------------------

    def _retry_limit(self, err: LLMError) -> int:
        """How many retries `err` gets: the configured number, fewer for a server that never answered (a wrong
        URL, or not up yet) unless retries were set explicitly."""
        limit = self.config.max_retries
        if err.connect and not self.reached and not self.config.retries_explicit:
            limit = min(limit, self.config.connect_retries)
        return limit

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        max_completion_tokens: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Yield deltas, retry notices and finally one `Completion`; raise LLMError when it gives up.

        `max_completion_tokens` overrides the configured limit for this request (the context manager
        fits it to what the window leaves)."""
        body = self.body_pieces(messages, tools, max_completion_tokens)
        attempt = 0
        gate = self.config.gate
        slots = slots_for(self.config.base_url)
        while True:
            if gate is not None:
                await gate.wait()
            try:
                if slots is not None:
                    await slots.acquire()  # at most the server's slots in flight from one batch or exploration
                try:
                    async for event in self._stream_once(body):
                        yield event
                finally:
                    if slots is not None:
                        slots.release()
                if slots is not None:
                    slots.answered()
                return
            except LLMError as err:
                limit = self._retry_limit(err)
                if not err.transient or attempt >= limit:
                    if err.transient and limit:
                        err.message += f" (gave up after {attempt + 1} attempts)"
                    raise
                attempt += 1
                delay = self._backoff(attempt, err.retry_after)
                if gate is not None and err.status == 429:
                    gate.throttled(delay)
                yield StreamRetry(attempt, limit, delay, err.message)
                await self.config.sleep(delay)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, 600.0)
        base = self.config.retry_base_delay * (2 ** (attempt - 1))
        return float(min(self.config.retry_max_delay, base) * random.uniform(0.75, 1.25))

    def _connection_error(self, exc: openai.APIConnectionError) -> LLMError:
        """The error for a request that never got an answer: out of file descriptors (the server is fine), or
        cannot reach the server (`connect` when it refused the connection, with where its URL came from)."""
        if (no_fd := out_of_descriptors(exc)) is not None:  # not "cannot reach": the server is fine
            return LLMError(no_fd, "transient")
        cause = exc.__cause__ or exc.__context__
        refused = isinstance(cause, httpx2.ConnectError)
        source = f" (from {self.config.url_source})" if refused and self.config.url_source else ""
        return LLMError(f"cannot reach {self.config.base_url}{source}: {_cause(exc)}", "transient", connect=refused)

    def _final_message(self, acc: StreamAccumulator) -> dict[str, Any]:
        """The assistant message of a finished stream, its reasoning in the field the server used (learnt
        for the next requests unless configured)."""
        if acc.reasoning_field and not self.config.reasoning_field:
            self.reasoning_field = acc.reasoning_field
        default_field = self.reasoning_field or self.profile.reasoning_field
        message = acc.message(default_field)
        if acc.reasoning_field is None and self.reasoning_field is None and not self.profile.name.startswith("kimi"):
            message.pop(default_field, None)  # a server that never reasons: send nothing it didn't send
        return message

    async def _stream_once(self, body: list[bytes]) -> AsyncIterator[StreamEvent]:
        length = sum(map(len, body))
        try:
            # The SDK's documented custom-request API (`client.post(..., cast_to=httpx2.Response)`) with
            # `stream=True`: the raw response comes back unread, so we parse the SSE lines ourselves.
            response = await self._sdk.post(
                "/chat/completions",
                cast_to=httpx2.Response,
                # a small body (most requests) goes as one bytes object: streaming it through an async
                # generator costs the HTTP stack more per request than joining a few hundred KB
                content=b"".join(body) if length <= _ONE_PIECE else _chunked(body),
                options={
                    "headers": {
                        "Content-Length": str(length),
                        "Content-Type": "application/json",
                        "Accept": "text/event-stream",
                        **self.config.extra_headers,
                    }
                },
                stream=True,
            )
        except openai.APIStatusError as exc:
            self.reached = True
            raise _from_status_error(exc, self.config.key_source) from None
        except openai.APITimeoutError:
            raise LLMError(f"the server did not answer within {self.config.timeout:g} s", "transient") from None
        except openai.APIConnectionError as exc:
            raise self._connection_error(exc) from None
        self.reached = True
        kind = response.headers.get("content-type", "").lower()
        if "text/html" in kind:
            await response.aclose()
            raise LLMError(
                f"{self.config.base_url} answered with an HTML page, not an event stream: it is not an "
                "OpenAI-compatible chat API (check the base URL; it usually ends in /v1)",
                "bad_request",
                response.status_code,
            )
        acc = StreamAccumulator()
        done = False
        got_choice = False
        after_done = 0
        try:
            async for line in response.aiter_lines():
                if done:
                    # Read on to the end of the body (normally just the last chunk's terminator): a response read
                    # to its end returns its connection to the pool, one closed early takes the connection with it.
                    after_done += 1
                    if after_done > 16:
                        break
                    continue
                if not line or line.startswith(":"):
                    continue
                if not line.startswith("data:"):
                    continue  # `event:`/`id:` fields carry nothing we need
                payload = line[5:].strip()
                if payload == "[DONE]":
                    done = True
                    continue
                try:
                    chunk = json.loads(payload)
                except json.JSONDecodeError:
                    raise LLMError(f"malformed chunk from the server: {payload[:200]!r}", "transient") from None
                if not isinstance(chunk, dict):
                    raise LLMError(f"unexpected chunk from the server: {payload[:200]!r}", "transient")
                if chunk.get("error"):
                    raise _from_stream_error(chunk["error"])
                if chunk.get("choices"):
                    got_choice = True
                for delta in acc.add(chunk):
                    yield StreamDelta(delta.kind, delta.text, delta.index)
        except httpx2.TimeoutException:
            raise LLMError(f"the stream stalled: no data for {self.config.timeout:g} s", "transient") from None
        except httpx2.HTTPError as exc:
            raise LLMError(f"the connection broke mid-stream: {_cause(exc)}", "transient") from None
        finally:
            await response.aclose()
        if not done and acc.finish_reason is None:
            raise LLMError("the stream ended before the response was complete", "transient")
        if not got_choice:
            raise LLMError("the server returned an empty response", "transient")
        yield Completion(self._final_message(acc), acc.finish_reason, acc.usage, length)


TOOL_CHOICES = ("auto", "none", "required")


def tool_choice_value(choice: str) -> str | dict[str, Any]:
    """The wire value of a tool choice: `auto`, `none`, `required`, or a tool's name (that function)."""
    if choice in TOOL_CHOICES:
        return choice
    return {"type": "function", "function": {"name": choice}}


_ONE_PIECE = 1 << 18
"""Bodies up to this many bytes are sent as one piece; larger ones are streamed in chunks of this size."""


async def _chunked(pieces: list[bytes], size: int = _ONE_PIECE) -> AsyncIterator[bytes]:
    """The body pieces joined into chunks of about `size` bytes (sent with a Content-Length)."""
    batch: list[bytes] = []
    total = 0
    for piece in pieces:
        batch.append(piece)
        total += len(piece)
        if total >= size:
            yield b"".join(batch)
            batch, total = [], 0
    if batch:
        yield b"".join(batch)


def _cause(exc: BaseException) -> str:
    inner = exc.__cause__ or exc.__context__
    text = str(inner or exc) or type(inner or exc).__name__
    return text


def _from_status_error(exc: openai.APIStatusError, key_source: str | None = None) -> LLMError:
    body = exc.body
    message = exc.message
    error_type: str | None = None
    code: str | int | None = None
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            message = str(err.get("message") or message)
            etype = err.get("type") or err.get("code")
            error_type = str(etype) if etype else None
            raw_code = err.get("code")
            code = raw_code if isinstance(raw_code, (str, int)) else None
        elif isinstance(err, str) and err:
            message = err  # LM Studio, Ollama: {"error": "text"}
    headers = dict(exc.response.headers.items()) if exc.response is not None else {}
    return classify_status(exc.status_code, message, error_type, headers, key_source=key_source, code=code, body=body)


def _from_stream_error(err: Any) -> LLMError:
    """An `{"error": ...}` event inside the stream (the server failed after it started answering).

    Some servers (LM Studio) report a context overflow this way, with HTTP 200: it is recognised here
    like any other context-length error.
    """
    if isinstance(err, dict):
        message = str(err.get("message") or err)
        etype = err.get("type") or err.get("code")
        status = err.get("status") or err.get("code")
        code = status if isinstance(status, int) else 500
        if not isinstance(status, int) and "invalid_request" in str(etype):
            code = 400
        raw_code = err.get("code")
        return classify_status(
            code,
            message,
            str(etype) if etype else None,
            {},
            code=raw_code if isinstance(raw_code, (str, int)) else None,
            body=err,
        )
    overflow = context_overflow(None, str(err))
    if overflow is not None:
        return LLMError(f"server error mid-stream: {err}", "context_length", overflow=overflow)
    return LLMError(f"server error mid-stream: {err}", "transient")


__all__ = [
    "ChatClient",
    "ClientConfig",
    "Completion",
    "LLMError",
    "StreamDelta",
    "StreamEvent",
    "StreamRetry",
    "new_http_client",
    "parse_retry_after",
    "share_connections",
    "tool_choice_value",
]
