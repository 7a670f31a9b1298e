"""`/model NAME --fresh` (a fork that starts the new model from a summary) and `/prompt` (what the model
is told)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kimicode.errors import KimicodeError

if TYPE_CHECKING:
    from kimicode.ui.app import Session


async def model_fresh(session: Session, name: str) -> None:
    """`/model NAME --fresh`: a fork of the conversation on model NAME, compacted into a summary before its
    first answer; the original session is left as it is."""
    from kimicode.ui.checkpoint_cmds import continue_in

    old = session.agent
    try:
        child = old.fork(model=name, on_switch="compact")
    except (KimicodeError, ValueError, RuntimeError, OSError) as exc:
        session.say(f"Could not fork: {exc}", "red")
        return
    await continue_in(session, child)
    session.say(f"Continuing in {child.session_id} on {name}, which starts from a summary of this conversation "
                f"at your next message. `kimicode -r {old.session_id}` goes back to the original.", "green")


async def cmd_prompt(session: Session, arg: str) -> None:
    """`/prompt`: the system prompt and tool definitions the model gets, with token counts."""
    from kimicode.agent.sysprompt import PromptReport

    agent = session.agent
    system = agent.messages[0].get("content", "") if agent.messages else ""
    report = PromptReport.of(str(system), agent.tools.schemas(), agent.context.accountant.text_tokens)
    session.console.print(report.text(), highlight=False, markup=False)
