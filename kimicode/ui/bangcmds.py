"""Claude Code's `` !`command` `` in a custom command's text: each runs before the prompt is sent, through
the session's permission check (deny refuses, ask asks here, allow runs, in the sandbox the decision
chose), and its output takes the place of the `` !`command` `` in the prompt, as Claude Code does. The
command's `allowed-tools` are already granted when this runs (`Bash(git status:*)` lets `!`git status``
run without a question)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
from typing import TYPE_CHECKING

from kimicode.permissions.engine import decide
from kimicode.tools.base import ToolError, ToolResult

if TYPE_CHECKING:
    from kimicode.tools.base import Tool
    from kimicode.ui.host import SessionHost

__all__ = ["BANG", "expand_bangs"]

BANG = re.compile(r"!`([^`\n]+)`")
TIMEOUT = 60.0
MAX_CHARS = 20_000


async def expand_bangs(session: SessionHost, name: str, prompt: str) -> str:
    """`prompt` with each `` !`command` `` replaced by the command's output (or why it did not run)."""
    matches = list(BANG.finditer(prompt))
    if not matches:
        return prompt
    tool = session.agent.tools.get("bash")
    parts: list[str] = []
    last = 0
    for m in matches:
        parts += [prompt[last : m.start()], await _one(session, name, tool, m.group(1).strip())]
        last = m.end()
    parts.append(prompt[last:])
    return "".join(parts)


async def _one(session: SessionHost, name: str, tool: Tool | None, command: str) -> str:
    from kimicode.ui import approvals

    agent = session.agent
    if tool is None:
        return f"[`{command}` not run: this session has no bash tool]"
    decision = decide(tool, {"command": command}, agent.permission_mode, agent.ctx, agent.policy)
    if decision.verdict == "deny":
        session.say(f"/{name}: `{command}` not run: {decision.reason}", "yellow")
        return f"[`{command}` not run: {decision.reason}]"
    approved = False
    if decision.verdict == "ask":
        answer = await approvals.choose(
            f"/{name} runs `{command}` to build its prompt ({decision.reason}). Run it?",
            [approvals.Option("yes", "y", "Yes"), approvals.Option("no", "n", "No")],
        )
        if answer != "yes":
            session.say(f"/{name}: `{command}` not run", "yellow")
            return f"[`{command}` not run: the user said no]"
        approved = True
    ctx = dataclasses.replace(
        agent.ctx, approved=approved, sandbox_profile=decision.profile, cancelled=threading.Event()
    )
    try:
        result = await asyncio.wait_for(tool.fn({"command": command}, ctx), TIMEOUT)
    except (ToolError, TimeoutError) as exc:
        session.say(f"/{name}: `{command}` failed: {exc or 'timed out'}", "yellow")
        return f"[`{command}` failed: {exc or 'timed out'}]"
    text = result.content if isinstance(result, ToolResult) else str(result)
    session.say(f"/{name}: ran `{command}`", "dim")
    return text.rstrip()[:MAX_CHARS]
