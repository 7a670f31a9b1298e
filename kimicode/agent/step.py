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
    await agent.ensure_client()  # imports the HTTP stack in a thread the first time
    from kimicode.llm.checked import checked_stream
    from kimicode.llm.protocol import Completion, StreamDelta, StreamRetry

    tools = agent.tools.schemas()
    kinds = {t.name: t.kind for t in agent.tools}
    if not agent.window_discovered:
        await discover_window(agent, emit)
    agent.context.set_window(agent.context_window, agent.answer_reserve)
    if agent.context.server_counts:  # llama.cpp counts the first request exactly (its template may leave tools out)
        await count_first_request(agent, tools)
    tools = agent.context.fit_tools(agent.messages, tools, emit)  # a compact set when a small window needs it
    est = await agent.context.prepare(agent.messages, tools, agent.client, emit, kinds)  # prune/compact to fit
    after_compaction(agent)  # keep the todo list visible to the model
    completion: Completion | None = None
    partial: list[str] = []  # the answer text so far: kept in the history if the user interrupts it
    for attempt in range(2):
        try:
            limit = agent.context.completion_tokens(est)  # prompt + max_tokens never over the window
            # checked: a caller's own client may yield anything (kimicode/llm/checked.py)
            async for ev in checked_stream(agent.client.stream(agent.messages, tools, max_completion_tokens=limit)):
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
                elif isinstance(ev, Completion):
                    completion = ev
            if completion is None:
                raise LLMError("the model client's stream ended without a Completion (the assistant message)",
                               "protocol")
            break
        except asyncio.CancelledError:
            text = "".join(partial)
            if text.strip() and agent.interrupted:
                agent.commit(interrupted_answer(text), emit)
            raise
        except LLMError as err:  # too long for the server after all: learn its numbers, make room, retry
            if err.kind != "context_length" or attempt:
                raise
            if not await agent.context.recover(err, agent.messages, tools, agent.client, emit, kinds):
                raise
            tools = agent.context.fit_tools(agent.messages, agent.tools.schemas(), emit)  # the window may be smaller
            est = agent.context.estimate(agent.messages, tools)
            emit(ContextUpdated(est, agent.context.budget.window))
    assert completion is not None  # the loop breaks only with one
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
    if agent.log and completion.usage:  # with kimicode's estimate of the request, to compare with the count
        agent.log.append({"type": "usage", "usage": completion.usage, "estimate": agent.context.last_estimate,
                          "calibration": agent.context.calibration_source})
    used = agent.context.observe(agent.messages, tools, completion.message, completion.usage)
    save_calibration(agent)
    emit(ContextUpdated(used, agent.effective_window, cached_t))
    return completion


def truncation(agent: Agent, finish_reason: str | None) -> str:
    """Why an answer cut at its token limit is not a success ("" when it is): only a limit the user set,
    sent whole, may cut an answer; one kimicode chose or lowered to fit the window never passes as done."""
    ctx = agent.context
    if finish_reason != "length" or (ctx.reserve_explicit and not ctx.cut_by_room()):
        return ""
    limit = ctx.last_max_tokens or ctx.budget.reserve
    if ctx.cut_by_room():
        why = (f"the context window ({ctx.budget.window:,} tokens) left room for only {limit:,} of the "
               f"{ctx.budget.reserve:,} reserved")
    else:
        why = "kimicode's default limit for this window; --max-tokens (or [context] max_tokens) sets the one you want"
    return f"the answer was cut off at {limit:,} tokens ({why})"


# -- tools ------------------------------------------------------------------------------------


async def discover_window(agent: Agent, emit: Callable[[Event], None]) -> None:
    """Ask the server about its window and template once per process (bounded; its last real answer is
    cached under KIMICODE_HOME); a flag or config window wins. Then start from the calibration learnt
    against this same server, and let a server that can count the first request count it."""
    from kimicode.llm.discovery import discover_server

    agent.window_discovered = True
    info = await discover_server(
        agent.endpoint.base_url, agent.endpoint.api_key, agent.endpoint.model, agent.home,
        headers=dict(agent.model_config.headers),
    )
    if info is None:
        restore_calibration(agent, "", emit)
        return
    if info.tools_rendered is False:
        agent.context.accountant.tools_in_prompt = False  # /props: the chat template leaves tools out
    restore_calibration(agent, info.fingerprint, emit)
    agent.context.server_counts = info.counts and not info.cached
    found = info.window
    if agent.window_origin in ("flag", "config") or not found:
        return
    if agent.context.server_limit and agent.context.server_limit != found and not info.cached:
        agent.context.forget_window()  # learnt from an earlier server: this one says what it serves now
    stale = " (its last answer: it does not answer now)" if info.cached else ""
    if found != agent.context_window:
        agent.context_window, agent.window_origin = found, "server"
        emit(Notice(f"context: the server reports a window of {found:,} tokens for {agent.endpoint.model}{stale}"))
        try:
            agent.context.set_window(found, agent.answer_reserve)
        except ValueError as exc:  # e.g. a 1k window, or --max-tokens larger than the server's window
            raise LLMError(f"the server serves {agent.endpoint.model} with a {found:,}-token window: {exc}",
                           "context_length") from None
        emit(ContextUpdated(agent.context.used, agent.context_window))
    else:
        agent.window_origin = "server"


def restore_calibration(agent: Agent, fingerprint: str, emit: Callable[[Event], None]) -> None:
    """Start from the calibration of this session (resume, -c, fork) or of this endpoint and model, when it
    was learnt against the same server (fingerprint); say so when the server changed since."""
    from kimicode.context import calibration

    ctx = agent.context
    ctx.fingerprint = fingerprint
    recorded = agent.context.calibration_record
    if recorded is not None and recorded.get("fingerprint") == fingerprint and ctx.restore_calibration(recorded):
        return
    stored = calibration.load(agent.home, agent.endpoint.base_url, agent.endpoint.model, fingerprint)
    if stored is not None and ctx.restore_calibration(stored):
        return
    if recorded is not None and fingerprint and recorded.get("fingerprint") not in (None, fingerprint):
        ctx.forget_window()
        emit(Notice("context: the server changed since this session last ran (another model file, window or "
                    "build): the token estimate is calibrated again from its counts"))


async def count_first_request(agent: Agent, tools: list[dict[str, Any]]) -> None:
    """llama.cpp renders and counts the request before it is sent: the estimate starts exact (its chat
    template may leave the tool definitions out, which no estimate can know)."""
    from kimicode.llm.discovery import count_request

    agent.context.server_counts = False
    counted = await count_request(agent.endpoint.base_url, agent.endpoint.api_key, agent.messages, tools,
                                  headers=dict(agent.model_config.headers))
    if counted:
        ctx = agent.context
        ctx.accountant.observe(agent.messages, tools, counted, ctx.estimate(agent.messages, tools))
        ctx.calibration_source = "probe"


def save_calibration(agent: Agent) -> None:
    """Keep what calibration learnt: in the session log when it changed, and per endpoint and model."""
    from kimicode.context import calibration

    state = agent.context.record_calibration()
    if state is not None and agent.context.accountant.calibrated:
        calibration.save(agent.home, agent.endpoint.base_url, agent.endpoint.model, state)
