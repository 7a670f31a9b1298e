"""One model step: fit the history to the window, stream the answer as events, count its usage.

Split from the turn loop (agent/core.py) so the loop reads in one sitting: it calls `model_step`, commits
the message, then runs the step's tool calls (agent/toolcalls.py).
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kimicode.agent.ecosystem import after_compaction
from kimicode.agent.interrupted import interrupted_answer
from kimicode.events import (
    ContentDelta,
    ContextUpdated,
    Event,
    ReasoningDelta,
    Retrying,
    ToolArgumentsDelta,
    UsageUpdated,
)
from kimicode.llm.accumulate import usage_numbers
from kimicode.llm.errors import LLMError

if TYPE_CHECKING:
    from kimicode.agent.core import Agent
    from kimicode.context.manager import ContextManager


async def _streamed(
    agent: Agent,
    sent: Any,
    schemas: Any,
    limit: int | None,
    emit: Callable[[Event], None],
    partial: list[str],
    thought: list[str],
) -> Any:
    """One request's stream as events; the answer and reasoning so far are collected in `partial` and
    `thought` (cleared when the client retries). Returns the Completion, None if the stream had none."""
    from kimicode.llm.checked import checked_stream
    from kimicode.llm.protocol import Completion, StreamDelta, StreamRetry

    completion = None
    # checked: a caller's own client may yield anything (kimicode/llm/checked.py)
    async for ev in checked_stream(agent.client.stream(sent, schemas, max_completion_tokens=limit)):
        if isinstance(ev, StreamDelta):
            if ev.kind == "reasoning":
                thought.append(ev.text)
                emit(ReasoningDelta(ev.text))
            elif ev.kind == "content":
                partial.append(ev.text)
                emit(ContentDelta(ev.text))
            else:
                emit(ToolArgumentsDelta(ev.index, ev.text))
        elif isinstance(ev, StreamRetry):
            partial.clear()  # the retried request starts the answer over
            thought.clear()
            emit(Retrying(ev.attempt, ev.max_retries, ev.delay, ev.error))
        elif isinstance(ev, Completion):
            completion = ev
    return completion


def _count_usage(agent: Agent, usage: Any, emit: Callable[[Event], None]) -> int:
    """Add a completion's usage to the agent's totals and say both; returns its cached tokens."""
    prompt_t, completion_t, cached_t = usage_numbers(usage)
    agent.usage["prompt_tokens"] += prompt_t
    agent.usage["completion_tokens"] += completion_t
    agent.usage["cached_tokens"] += cached_t
    emit(
        UsageUpdated(
            prompt_t,
            completion_t,
            cached_t,
            agent.usage["prompt_tokens"],
            agent.usage["completion_tokens"],
            agent.usage["cached_tokens"],
        )
    )
    return cached_t


async def model_step(agent: Agent, emit: Callable[[Event], None]) -> Any:
    await agent.ensure_client()  # imports the HTTP stack in a thread the first time
    from kimicode.llm.protocol import Completion

    tools = agent.tools.schemas()
    kinds = {t.name: t.kind for t in agent.tools}
    parts = agent.parts
    if not parts.window_discovered:
        await parts.discover_window(emit)
    agent.context.set_window(agent.context_window, agent.answer_reserve)
    if agent.context.server_counts:  # llama.cpp counts the first request exactly (its template may leave tools out)
        await parts.count_first_request(tools)
    tools = agent.context.fit_tools(agent.messages, tools, emit)  # a compact set when a small window needs it
    est = await agent.context.prepare(agent.messages, tools, agent.client, emit, kinds)  # prune/compact to fit
    after_compaction(agent)  # keep the todo list visible to the model
    completion: Completion | None = None
    partial: list[str] = []  # the answer text so far: kept in the history if the user interrupts it
    thought: list[str] = []  # and the reasoning so far, kept with it byte for byte
    retry = Recovery()
    while True:
        try:
            limit = agent.context.completion_tokens(est)  # prompt + max_tokens never over the window
            sent, schemas = agent.messages, tools
            if agent.parts.client.given is not None:  # a caller's client gets copies: what it changes (an adapter
                sent, schemas = copy.deepcopy((sent, schemas))  # taking the system prompt out) stays its own
            completion = await _streamed(agent, sent, schemas, limit, emit, partial, thought)
            if completion is None:
                raise LLMError(
                    "the model client's stream ended without a Completion (the assistant message)", "protocol"
                )
            break
        except asyncio.CancelledError:
            text, reasoning = "".join(partial), "".join(thought)
            if (text.strip() or reasoning.strip()) and agent.interrupted:
                agent.commit(interrupted_answer(text, reasoning), emit)
            raise
        except LLMError as err:  # too long for the server after all: learn its numbers, make room, retry
            if err.kind != "context_length":
                raise
            if agent.context.capacity(err, est, window_reported=agent.window_origin == "server"):
                await retry.wait_for_room(agent, err, emit)  # a busy server, not a long request
                partial.clear()
                thought.clear()
                continue
            if not retry.may_recover():
                raise
            if not await agent.context.recover(
                err, agent.messages, tools, agent.client, emit, kinds, after_cap=retry.capped
            ):
                raise
            retry.capped = agent.context.retry_cap is not None
            tools = agent.context.fit_tools(agent.messages, agent.tools.schemas(), emit)  # the window may be smaller
            est = agent.context.estimate(agent.messages, tools)
            emit(ContextUpdated(est, agent.context.budget.window))
    assert completion is not None  # the loop breaks only with one
    cached_t = _count_usage(agent, completion.usage, emit)
    if agent.log and completion.usage:  # with kimicode's estimate of the request, to compare with the count
        agent.log.append(
            {
                "type": "usage",
                "usage": completion.usage,
                "estimate": agent.context.last_estimate,
                "calibration": agent.context.calibration_source,
            }
        )
    used = agent.context.observe(agent.messages, tools, completion.message, completion.usage)
    parts.save_calibration()
    emit(ContextUpdated(used, agent.effective_window, cached_t))
    return completion


class Recovery:
    """How a step has retried after context errors: once after making room, once more when that only lowered
    max_tokens (then the history is compacted), and with backoff while a busy server's shared context is full."""

    def __init__(self) -> None:
        self.recovered = 0
        self.capped = False
        """The last recovery only lowered max_tokens: if that is refused too, the history is compacted."""
        self.busy = 0

    def may_recover(self) -> bool:
        self.recovered += 1
        return self.recovered == 1 or (self.recovered == 2 and self.capped)

    async def wait_for_room(self, agent: Agent, err: LLMError, emit: Callable[[Event], None]) -> None:
        """Back off before sending the same request again; tell a shared slot limiter (batch, branches) to send
        fewer at once. LLMError (transient) once the retries are used up."""
        from kimicode.llm.ratelimit import slots_for

        self.busy += 1
        why = "the server's context is shared by its slots and full with other requests"
        if self.busy > agent.max_retries:
            raise LLMError(
                f"{err.message} ({why}; gave up after {self.busy} attempts: run fewer at once, or give "
                "the server more context per slot: llama.cpp -c, --parallel)",
                "transient",
                err.status,
            )
        if (slots := slots_for(agent.endpoint.base_url)) is not None:
            slots.pushed_back()
        delay = min(60.0, agent.retry_base_delay * 2 ** (self.busy - 1)) * random.uniform(0.75, 1.25)
        emit(Retrying(self.busy, agent.max_retries, delay, f"{err.message} ({why}: not a context overflow)"))
        await asyncio.sleep(delay)


def truncation(ctx: ContextManager, finish_reason: str | None) -> str:
    """Why an answer cut at its token limit is not a success ("" when it is): only a limit the user set,
    sent whole, may cut an answer; one kimicode chose or lowered to fit the window never passes as done."""
    if finish_reason != "length" or (ctx.reserve_explicit and not ctx.cut_by_room()):
        return ""
    limit = ctx.last_max_tokens or ctx.budget.reserve
    if ctx.cut_by_room():
        why = (
            f"the context window ({ctx.budget.window:,} tokens) left room for only {limit:,} of the "
            f"{ctx.budget.reserve:,} reserved"
        )
    else:
        why = "kimicode's default limit for this window; --max-tokens (or [context] max_tokens) sets the one you want"
    return f"the answer was cut off at {limit:,} tokens ({why})"
