"""What the user types while a turn runs, and the plan-mode question after it.

Typing while the agent works echoes under the status line; Enter queues the message (`Session.queued`),
sent in order when the turn ends; Ctrl-S sends it into the running turn instead (mid-turn steering, as
in Kimi Code: the model reads it after the current step's tool calls); after an interrupt the queue goes
back into the prompt, so Esc then Enter sends it at once. In plan mode an answer ends with "Approve this
plan?": yes switches to accept-edits and sends `PLAN_APPROVED`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from kimicode.agent.ecosystem import steer as steer_turn
from kimicode.events import TurnFinished
from kimicode.ui.approvals import Option, choose
from kimicode.ui.format import one_line

if TYPE_CHECKING:
    from kimicode.ui.app import Session
    from kimicode.ui.keys import KeyListener

PLAN_APPROVED = "The plan is approved: carry it out."
"""Sent when the user approves a plan (the mode note before the next step says edits now run)."""


def input_footer(queued: list[str], typed: str, width: int) -> Text | None:
    """Under the status line while a turn runs: the queued messages and the line being typed, each row
    at most `width` cells (the end of a long input is shown; the hint only when it fits)."""
    if not typed and not queued:
        return None
    width = max(16, width)
    out = Text()
    for message in queued:
        out.append(f"  ⏎ queued: {one_line(message, width - 12)}\n", style="dim")
    out.append("› ", style="bold cyan")
    shown = typed.replace("\n", " ⏎ ")
    room = width - 2
    out.append(shown if len(shown) <= room else "…" + shown[-(room - 1) :])
    hint = "  (enter queues it, ctrl-s sends it now)"
    if not queued and len(shown) + len(hint) <= room:
        out.append(hint, style="dim")
    return out


def steer(session: Session, listener: KeyListener) -> None:
    """Ctrl-S while a turn runs: send the line being typed (else the queued messages) into the turn; the
    model reads it at the next step boundary. What the turn ends before reading is sent as the next prompt."""
    texts = [listener.typed.strip()] if listener.typed.strip() else list(session.queued)
    if not texts:
        session.say("Type a message first: ctrl-s sends it into the running turn.", "dim")
        return
    if listener.typed.strip():
        listener.typed = ""
    else:
        session.queued.clear()
    for text in texts:
        steer_turn(session.agent, text)
        session.say(f"↳ sent into the running turn (read after the current step): {one_line(text, 100)}", "cyan")


async def offer_plan(session: Session, finished: TurnFinished | None) -> None:
    """In plan mode, an answer ends with a plan: ask whether to carry it out. Approving switches to
    accept-edits and sends the go-ahead at once; Esc or No keeps planning (type what to change)."""
    if finished is None or finished.status != "success" or not finished.result.strip():
        return
    if session.agent.permission_mode != "plan" or session.queued:  # typed meanwhile: that is the answer
        return

    options = [
        Option("approve", "y", "Yes, switch to accept-edits and carry it out"),
        Option("keep", "n", "No, keep planning (esc too; then say what to change)"),
    ]
    try:
        answer = await choose("Approve this plan?", options)
    except (EOFError, KeyboardInterrupt):
        answer = None
    if answer != "approve":
        session.say("Still in plan mode: say what to change.", "dim")
        return
    session.agent.set_permission_mode("accept-edits")
    session.say("✓ plan approved; permission mode: accept-edits", "green")
    session.queued.insert(0, PLAN_APPROVED)
