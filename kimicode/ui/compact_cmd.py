"""`/compact`: summarise the conversation now, and say once, truthfully, what it did."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kimicode.events import Notice
from kimicode.ui.format import tokens

if TYPE_CHECKING:
    from kimicode.context.compact import CompactionResult
    from kimicode.ui.host import SessionHost

__all__ = ["cmd_compact"]


async def cmd_compact(session: SessionHost, arg: str) -> None:
    agent = session.agent

    warnings: list[Notice] = []  # said after the outcome, unless its own line says the same (once, whole)

    async def compacting() -> CompactionResult | None:
        async with agent.compact(arg or None) as events:  # its events stream like a turn's
            async for ev in events:
                if isinstance(ev, Notice):
                    warnings.extend([ev] if ev.level != "info" else [])  # the outcome is reported below
                else:
                    session.on_side_event(ev)
            return await events

    try:
        with session.transient("Compacting… (Esc cancels)"):
            outcome = await session.run_cancellable(compacting())
    except asyncio.CancelledError:
        session.say("Compaction cancelled; the conversation is unchanged.", "yellow")
        return
    except Exception as exc:
        session.say(f"Compaction failed: {exc}. The conversation is unchanged.", "red")
        return
    for ev in warnings if outcome is None or not outcome.fallback else ():
        session.on_side_event(ev)
    if outcome is None:
        session.say("Nothing to compact yet: the conversation is still short.")
        return
    before, after = outcome.tokens_before, outcome.tokens_after
    if after >= before:  # a summary longer than what it replaced freed nothing: not "compacted"
        session.say(
            f"Summarised {outcome.summarized} messages, but the context did not shrink (~{tokens(before)} → "
            f"~{tokens(after)} tokens); /rewind or /clear frees more.",
            "yellow",
        )
    else:
        session.say(
            f"Compacted {outcome.summarized} messages into a summary: ~{tokens(before)} → ~{tokens(after)} tokens.",
            "green",
        )
    if outcome.fallback:
        session.say(
            f"The summary request failed ({outcome.error or 'no details'}); a simpler summary was kept instead.",
            "yellow",
        )
