"""One model step: fit the history to the window, stream the answer as events, count its usage.

Split from the turn loop (agent/core.py) so the loop reads in one sitting: it calls `model_step`, commits
the message, then runs the step's tool calls (agent/toolcalls.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kimicode.agent.ecosystem import after_compaction
from kimicode.agent.interrupted import interrupted_answer
from kimicode.events import (
    ContentDelta,
    ContextUpdated,
    Event,
    Notice,
    ReasoningDelta,
    Retrying,
    ToolArgumentsDelta,
    UsageUpdated,
)
from kimicode.llm.accumulate import usage_numbers
from kimicode.llm.errors import LLMError

if TYPE_CHECKING:
    from kimicode.agent.core import Agent


async def model_step(agent: Agent, emit: Callable[[Event], None]) -> Any:
    await agent._ensure_client()  # imports the HTTP stack in a thread the first time
    from kimicode.llm.client import Completion, StreamDelta, StreamRetry

    tools = agent.tools.schemas()
    kinds = {t.name: t.kind for t in agent.tools}
    if not agent._discovered:
        await discover_window(agent, emit)
    agent.context.set_window(agent.context_window, agent.answer_reserve)
    est = await agent.context.prepare(agent.messages, tools, agent.client, emit, kinds)  # prune/compact to fit
    after_compaction(agent)  # keep the todo list visible to the model
    completion: Completion | None = None
    partial: list[str] = []  # the answer text so far: kept in the history if the user interrupts it
    for attempt in range(2):
        try:
            limit = agent.context.completion_tokens(est)  # prompt + max_tokens never over the window
            async for ev in agent.client.stream(agent.messages, tools, max_completion_tokens=limit):
                if isinstance(ev, StreamDelta):
                    if ev.kind == "reasoning":
                        emit(ReasoningDelta(ev.text))
                    elif ev.kind == "content":
                        partial.append(ev.text)
                        emit(ContentDelta(ev.text))
                    else:
                        emit(ToolArgumentsDelta(ev.index, ev.text))
                elif isinstance(ev, StreamRetry):
                    partial.clear()  # the retried request starts the answer over
                    emit(Retrying(ev.attempt, ev.max_retries, ev.delay, ev.error))
                else:
                    completion = ev
            break
        except asyncio.CancelledError:
            text = "".join(partial)
            if text.strip() and agent._interrupted:
                agent._commit(interrupted_answer(text), emit)
            raise
        except LLMError as err:  # too long for the server after all: compact, then retry once
            if err.kind != "context_length" or attempt:
                raise
            if not await agent.context.recover(err, agent.messages, tools, agent.client, emit, kinds):
                raise
            est = agent.context.last_estimate
            emit(ContextUpdated(est, agent.context.budget.window))
    assert completion is not None
    prompt_t, completion_t, cached_t = usage_numbers(completion.usage)
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
    if agent.log and completion.usage:
        agent.log.append({"type": "usage", "usage": completion.usage})
    used = agent.context.observe(agent.messages, tools, completion.message, completion.usage)
    emit(ContextUpdated(used, agent.effective_window, cached_t))
    return completion

# -- tools ------------------------------------------------------------------------------------


async def discover_window(agent: Agent, emit: Callable[[Event], None]) -> None:
    """Ask the server for its window once (bounded, cached under KIMICODE_HOME); a flag or config wins."""
    from kimicode.llm.discovery import discover_window

    agent._discovered = True
    found = await discover_window(
        agent.endpoint.base_url, agent.endpoint.api_key, agent.endpoint.model, agent.home,
        headers=dict(agent.model_config.headers),
    )
    if found and found != agent.context_window:
        agent.context_window, agent._window_source = found, "server"
        emit(Notice(f"context: the server reports a window of {found:,} tokens for {agent.endpoint.model}"))
        try:
            agent.context.set_window(found, agent.answer_reserve)
        except ValueError as exc:  # e.g. a 1k window, or --max-tokens larger than the server's window
            raise LLMError(f"the server serves {agent.endpoint.model} with a {found:,}-token window: {exc}",
                           "context_length") from None
        emit(ContextUpdated(agent.context.used, agent.context_window))
    elif found:
        agent._window_source = "server"
