"""Where the agent runs hooks (kimicode/extensions/hooks.py): before and after tool calls, at the
permission question, when a prompt is submitted, when the model stops, around compaction and at the start
and end of a session. Every run is an event (`HookRan`) and a `hook` record in the session log.

A hook's `allow` never overrides a deny: a deny rule or the permission mode's refusal stands, an `ask`
rule still asks, and a rewritten input (`updatedInput`) is validated and judged by the rules again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kimicode.events import Event, HookRan, Notice, PermissionDenied
from kimicode.extensions.hookrun import EMPTY, Hooks, Verdict
from kimicode.extensions.toolnames import claude_input, claude_name, from_claude_input, names_of
from kimicode.permissions.engine import Decision, decide
from kimicode.tools.registry import validate

if TYPE_CHECKING:
    from kimicode.agent.core import Agent
    from kimicode.agent.toolcalls import Prepared

Emit = Callable[[Event], None]
CLAUDE_MODES = {"default": "default", "accept-edits": "acceptEdits", "plan": "plan", "yolo": "bypassPermissions"}
MAX_STOP_BLOCKS = 8
"""Times Stop hooks may send the model back to work in one turn (a hook that always blocks must not
loop until max_turns)."""


def load(agent: Agent) -> Hooks | None:
    """The agent's hooks from its configuration, Claude Code's settings and enabled plugins; None when
    there are none (or the agent is hermetic). A malformed hooks table raises ConfigError."""
    settings = agent.options.config
    if settings is None:
        return None
    from kimicode.config.endpoint import ConfigError
    from kimicode.extensions.hooks import HookConfigError, load_hooks
    from kimicode.extensions.plugins import enabled_plugins

    try:
        hookset = load_hooks(agent.workspace, {p: settings.parsed[p] for p in settings.sources}, settings.config.hooks,
                             trusted=settings.trusted, plugins=[(p.name, p.root) for p in enabled_plugins(agent.home)])
    except HookConfigError as exc:
        raise ConfigError(str(exc)) from None
    for problem in hookset.problems:
        agent.notify(f"hooks: {problem}", "warning")
    if not len(hookset):
        return None
    key = agent.endpoint.api_key or ""
    env = {k: v for k, v in os.environ.items() if not (key and v == key)}  # as Claude Code: the user's own
    return Hooks(hookset, agent.workspace, env)


def payload(agent: Agent, event: str, **fields: Any) -> dict[str, Any]:
    """Claude Code's common fields, then the event's own."""
    log = agent.log
    return {
        "session_id": agent.session_id,
        "transcript_path": str(log.transcript or "") if log is not None else "",
        "cwd": str(agent.workspace),
        "hook_event_name": event,
        "permission_mode": CLAUDE_MODES.get(agent.permission_mode, agent.permission_mode),
        **fields,
    }


async def fire(agent: Agent, event: str, values: tuple[str, ...], emit: Emit | None, call_id: str = "",
               **fields: Any) -> Verdict:
    """Run the hooks of `event` that match `values`; report each run (event, log) and each message."""
    hooks: Hooks | None = agent.extras.hooks
    specs = hooks.matching(event, values) if hooks is not None else []
    if not specs or hooks is None:
        return EMPTY
    verdict = await hooks.run(specs, payload(agent, event, **fields))
    mask = agent.masker.mask
    for r in verdict.reports:
        record = HookRan(r.event, mask(r.command), r.outcome, r.exit_code, r.duration_ms, mask(r.message),
                         call_id, r.source)
        if agent.log is not None:
            agent.log.append({"type": "hook", "event": r.event, "command": record.command, "outcome": r.outcome,
                              "exit_code": r.exit_code, "duration_ms": r.duration_ms, "message": record.message,
                              "tool_use_id": call_id, "source": r.source})
        if emit is not None:
            emit(record)
    for text in verdict.messages:
        if emit is not None:
            emit(Notice(mask(text), "warning"))
    if verdict.stop is not None:
        agent.extras.hook_stop = verdict.stop
    return verdict


def _refuse(agent: Agent, prep: Prepared, event: str, reason: str, denials: list[dict[str, Any]], emit: Emit) -> None:
    tool = prep.tool
    assert tool is not None
    reason = agent.masker.mask(reason)  # a hook's stderr may carry a secret: events and the result show it
    prep.error = f"Blocked by a {event} hook: {reason}"
    denials.append({"tool_name": tool.name, "tool_use_id": prep.call_id, "tool_input": dict(prep.args),
                    "reason": f"{event} hook: {reason}"})
    emit(PermissionDenied(prep.call_id, tool.name, prep.args, f"{event} hook: {reason}", "", False, tool.kind))


def _rewrite(agent: Agent, prep: Prepared, updated: Mapping[str, Any]) -> str | None:
    """Apply a hook's `updatedInput` to the call; why not, when it does not fit the tool's schema."""
    tool = prep.tool
    assert tool is not None
    args = from_claude_input(tool.name, updated, prep.args)
    problems = validate(tool.parameters, args)
    if problems:
        return "its updatedInput does not fit the tool: " + "; ".join(problems[:3])
    prep.args = args
    prep.canonical = json.dumps(args, sort_keys=True, ensure_ascii=False)
    return None


async def before_tool(agent: Agent, prep: Prepared, decision: Decision, denials: list[dict[str, Any]],
                      emit: Emit) -> Decision | None:
    """PreToolUse hooks, then (when the call would ask) PermissionRequest hooks; the decision that
    stands, or None when a hook refused the call (recorded as a denial)."""
    tool = prep.tool
    assert tool is not None
    values = names_of(tool.name)
    for event in ("PreToolUse", "PermissionRequest"):
        if event == "PermissionRequest" and decision.verdict != "ask":
            break
        verdict = await fire(agent, event, values, emit, prep.call_id, tool_name=claude_name(tool.name),
                             tool_input=claude_input(tool.name, prep.args), tool_use_id=prep.call_id)
        if verdict is EMPTY:
            continue
        if verdict.decision in ("deny", "block") or verdict.stop is not None:
            _refuse(agent, prep, event, verdict.reason if verdict.decision else verdict.stop or "", denials, emit)
            return None
        if verdict.updated_input is not None:
            problem = _rewrite(agent, prep, verdict.updated_input)
            if problem:
                _refuse(agent, prep, event, problem, denials, emit)
                return None
            redo = decide(tool, prep.args, agent.permission_mode, agent.ctx, agent.policy)
            if redo.verdict == "deny" or decision.verdict == "deny":
                return redo if redo.verdict == "deny" else decision
            decision = redo
        decision = _combine(decision, verdict, agent.permission_mode)
    return decision


def _combine(decision: Decision, verdict: Verdict, mode: str) -> Decision:
    """A hook's allow turns the mode's question into a yes (never a deny, never a user's `ask` rule, never
    in plan mode, where nothing is changed); its ask turns an allow into a question."""
    if verdict.decision == "allow" and decision.verdict == "ask" and not decision.by_rule and mode != "plan":
        return Decision("allow", "allowed by a hook")
    if verdict.decision == "ask" and decision.verdict == "allow":
        return Decision("ask", f"a hook asks: {verdict.reason}")
    return decision


async def after_tool(agent: Agent, prep: Prepared, content: str, is_error: bool, emit: Emit) -> str:
    """PostToolUse (or PostToolUseFailure) hooks: what they tell the model is added to the result."""
    if prep.tool is None or agent.extras.hooks is None:
        return content
    name = prep.tool.name
    event = "PostToolUseFailure" if is_error else "PostToolUse"
    response: dict[str, Any] = {"content": content, "is_error": is_error}
    if is_error:
        verdict = await fire(agent, event, names_of(name), emit, prep.call_id, tool_name=claude_name(name),
                             tool_input=claude_input(name, prep.args), tool_use_id=prep.call_id, error=content)
    else:
        verdict = await fire(agent, event, names_of(name), emit, prep.call_id, tool_name=claude_name(name),
                             tool_input=claude_input(name, prep.args), tool_use_id=prep.call_id,
                             tool_response=response)
    if not verdict.context:
        return content
    return content + "\n\n" + "\n".join(f"[{event} hook] {text}" for text in verdict.context)


class HookStop(Exception):
    """A hook ended the turn: a UserPromptSubmit hook blocked the prompt (`hook_blocked`), or a hook
    answered `continue: false` (`hook_stopped`). The turn finishes with status `error` and this kind."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def check_stop(agent: Agent) -> None:
    """Raise HookStop when a hook of this step answered `continue: false`."""
    why = agent.extras.hook_stop
    if why is not None:
        agent.extras.hook_stop = None
        raise HookStop(f"stopped by a hook: {why}", "hook_stopped")


async def prompt_submitted(agent: Agent, prompt: str, emit: Emit) -> list[dict[str, Any]]:
    """SessionStart (on the agent's first turn) and UserPromptSubmit hooks: the messages carrying what they
    add to the conversation (committed after the prompt). Raises HookStop when the prompt is blocked."""
    if agent.extras.hooks is None or agent.extras.subagent:
        return []
    context: list[str] = []
    if not agent.extras.session_started:
        agent.extras.session_started = True
        source = "resume" if any(m.get("role") == "user" for m in agent.messages) else "startup"
        context += (await fire(agent, "SessionStart", (source,), emit, source=source)).context
    verdict = await fire(agent, "UserPromptSubmit", (), emit, prompt=prompt)
    agent.extras.hook_stop = None
    if verdict.decision == "block" or verdict.stop is not None:
        why = verdict.reason if verdict.decision == "block" else verdict.stop or ""
        raise HookStop(f"a UserPromptSubmit hook blocked the prompt: {why}", "hook_blocked")
    context += verdict.context
    return [context_message(context)] if context else []


def context_message(context: list[str]) -> dict[str, Any]:
    """The user message carrying what hooks added (after the prompt, like the permission-mode note)."""
    return {"role": "user", "content": "[context from hooks]\n" + "\n\n".join(context)}


async def stop_blocked(agent: Agent, final: str, emit: Emit) -> str | None:
    """Stop (SubagentStop in a subagent) hooks when the model is done: the reason to carry on, or None."""
    extras = agent.extras
    if extras.hooks is None:
        return None
    event = "SubagentStop" if extras.subagent else "Stop"
    active = extras.stop_blocks > 0
    verdict = await fire(agent, event, (), emit, stop_hook_active=active, last_assistant_message=final)
    if verdict.decision != "block" or extras.stop_blocks >= MAX_STOP_BLOCKS:
        extras.stop_blocks = 0
        return None
    extras.stop_blocks += 1
    return verdict.reason


async def notify(agent: Agent, message: str, kind: str, emit: Emit | None) -> None:
    """Notification hooks (a permission question is about to be shown)."""
    if agent.extras.hooks is not None:
        await fire(agent, "Notification", (kind,), emit, message=message, notification_type=kind)


def watch_compaction(agent: Agent) -> None:
    """Run PreCompact hooks when a compaction is about to summarise: `manual` for /compact
    (`agent.compact()`), `auto` when the context fills up or the server said it was too long."""

    async def before(reason: str, instructions: str | None, emit: Emit) -> None:
        trigger = "manual" if reason == "manual" else "auto"
        await fire(agent, "PreCompact", (trigger,), emit, trigger=trigger, custom_instructions=instructions or "")

    agent.context.before_compact = before


async def session_end(agent: Agent, reason: str) -> None:
    """SessionEnd hooks, once per SessionStart (logged; there is no stream to report to any more)."""
    extras = agent.extras
    if extras.hooks is None or not extras.session_started or extras.subagent:
        return
    extras.session_started = False
    await fire(agent, "SessionEnd", (reason,), None, reason=reason)
