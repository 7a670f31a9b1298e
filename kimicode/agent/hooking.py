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

from kimicode.events import Event, HookRan, Notice, PermissionDenied, frozen
from kimicode.extensions.hookrun import EMPTY, Hooks, Verdict
from kimicode.extensions.toolnames import claude_input, claude_name, from_claude_input, names_of
from kimicode.permissions.engine import Decision, decide
from kimicode.prompts import hooks_note
from kimicode.tools.registry import validate

if TYPE_CHECKING:
    from pathlib import Path

    from kimicode.agent.core import Agent
    from kimicode.agent.toolcalls import Prepared
    from kimicode.config.settings import Settings
    from kimicode.extensions.hooks import HookSpec

Emit = Callable[[Event], None]
CLAUDE_MODES = {"default": "default", "accept-edits": "acceptEdits", "plan": "plan", "yolo": "bypassPermissions"}
_REFUSALS = frozenset({"deny", "block", "refused", "stop"})
"""Outcomes of a hook run that refuse the call (the hook a denial names)."""
MAX_STOP_BLOCKS = 8
"""Times Stop hooks may send the model back to work in one turn (a hook that always blocks must not
loop until max_turns)."""


def load(
    settings: Settings | None, workspace: Path, home: Path, api_key: str, warn: Callable[[str], None]
) -> Hooks | None:
    """The hooks of a configuration (`settings`), Claude Code's settings and enabled plugins; None when
    there are none (or the agent is hermetic: no `settings`). A malformed hooks table raises ConfigError."""
    if settings is None:
        return None
    from kimicode.config.endpoint import ConfigError
    from kimicode.extensions.claudeplugins import plugins_in_use
    from kimicode.extensions.hooks import HookConfigError, load_hooks

    try:
        hookset = load_hooks(
            workspace,
            {p: settings.parsed[p] for p in settings.sources},
            settings.config.hooks,
            trusted=settings.trusted,
            plugins=[(p.name, p.root) for p in plugins_in_use(home)],
        )
    except HookConfigError as exc:
        raise ConfigError(str(exc)) from None
    for problem in hookset.problems:
        warn(f"hooks: {problem}")
    if not len(hookset):
        return None
    env = {k: v for k, v in os.environ.items() if not (api_key and v == api_key)}  # as Claude Code: the user's own
    return Hooks(hookset, workspace, env)


class AgentHooks:
    """An agent's hooks and their state in its session: the turn loop and the tool calls call its methods,
    each doing nothing when no hook is configured (`hooks` None)."""

    def __init__(self, agent: Agent, hooks: Hooks | None) -> None:
        self.agent = agent
        self.hooks = hooks
        self.stop: str | None = None
        """Set when a hook answered `continue: false`: the turn ends with this reason."""
        self.session_started = False
        self.stop_blocks = 0
        if hooks is not None:
            agent.context.before_compact = self.before_compact  # PreCompact hooks

    def payload(self, event: str, **fields: Any) -> dict[str, Any]:
        """Claude Code's common fields, then the event's own."""
        agent = self.agent
        log = agent.log
        return {
            "session_id": agent.session_id,
            "transcript_path": str(log.transcript or "") if log is not None else "",
            "cwd": str(agent.workspace),
            "hook_event_name": event,
            "permission_mode": CLAUDE_MODES.get(agent.permission_mode, agent.permission_mode),
            **fields,
        }

    async def fire(
        self,
        event: str,
        values: tuple[str, ...],
        emit: Emit | None,
        call_id: str = "",
        *,
        call: tuple[str, str, Mapping[str, Any]] | None = None,
        **fields: Any,
    ) -> Verdict:
        """Run the hooks of `event` that match `values` (and, for a tool `call` (name, kind, arguments), whose
        `if` rule names it); report each run (event, log) and each message."""
        hooks = self.hooks
        specs = hooks.matching(event, values) if hooks is not None else []
        if call is not None:
            specs = _named_by_condition(specs, call, self.agent.workspace)
        if not specs or hooks is None:
            return EMPTY
        verdict = await hooks.run(specs, self.payload(event, **fields))
        mask, log = self.agent.masker.mask, self.agent.log
        for r in verdict.reports:
            record = HookRan(
                r.event, mask(r.command), r.outcome, r.exit_code, r.duration_ms, mask(r.message), call_id, r.source
            )
            if log is not None:
                log.append(
                    {
                        "type": "hook",
                        "event": r.event,
                        "command": record.command,
                        "outcome": r.outcome,
                        "exit_code": r.exit_code,
                        "duration_ms": r.duration_ms,
                        "message": record.message,
                        "tool_use_id": call_id,
                        "source": r.source,
                    }
                )
            if emit is not None:
                emit(record)
        for text in verdict.messages:
            if emit is not None:
                emit(Notice(mask(text), "warning"))
        if verdict.stop is not None:
            self.stop = verdict.stop
        return verdict

    def _refuse(
        self,
        prep: Prepared,
        event: str,
        reason: str,
        denials: list[dict[str, Any]],
        emit: Emit,
        verdict: Verdict | None = None,
    ) -> None:
        tool = prep.tool
        assert tool is not None
        refusing = [r for r in (verdict.reports if verdict is not None else ()) if r.outcome in _REFUSALS]
        mask = self.agent.masker.mask  # a hook's command or stderr may carry a secret: events and the result show it
        hook = mask("; ".join(f"{event} hook `{r.command}` ({r.source})" for r in refusing)) or f"a {event} hook"
        reason = mask(reason)
        prep.error = f"Blocked by a {event} hook: {reason}"
        denials.append(
            {
                "tool_name": tool.name,
                "tool_use_id": prep.call_id,
                "tool_input": dict(prep.args),
                "reason": f"{event} hook: {reason}",
            }
        )
        emit(
            PermissionDenied(
                prep.call_id, tool.name, frozen(prep.args), f"{event} hook: {reason}", "", False, tool.kind, hook
            )
        )

    async def before_tool(
        self, prep: Prepared, decision: Decision, denials: list[dict[str, Any]], emit: Emit
    ) -> Decision | None:
        """PreToolUse hooks, then (when the call would ask) PermissionRequest hooks; the decision that
        stands, or None when a hook refused the call (recorded as a denial)."""
        tool = prep.tool
        assert tool is not None
        agent = self.agent
        values = names_of(tool.name)
        for event in ("PreToolUse", "PermissionRequest"):
            if event == "PermissionRequest" and decision.verdict != "ask":
                break
            verdict = await self.fire(
                event,
                values,
                emit,
                prep.call_id,
                call=(tool.name, tool.kind, prep.args),
                tool_name=claude_name(tool.name),
                tool_input=claude_input(tool.name, prep.args),
                tool_use_id=prep.call_id,
            )
            if verdict is EMPTY:
                continue
            if verdict.decision in ("deny", "block") or verdict.stop is not None:
                self._refuse(
                    prep, event, verdict.reason if verdict.decision else verdict.stop or "", denials, emit, verdict
                )
                return None
            if verdict.updated_input is not None:
                problem = _rewrite(prep, verdict.updated_input)
                if problem:
                    self._refuse(prep, event, problem, denials, emit, verdict)
                    return None
                redo = decide(tool, prep.args, agent.permission_mode, agent.ctx, agent.policy)
                if redo.verdict == "deny" or decision.verdict == "deny":
                    return redo if redo.verdict == "deny" else decision
                decision = redo
            decision = _combine(decision, verdict, agent.permission_mode)
        return decision

    async def after_tool(self, prep: Prepared, content: str, is_error: bool, emit: Emit) -> str:
        """PostToolUse (or PostToolUseFailure) hooks: what they tell the model is added to the result."""
        if prep.tool is None or self.hooks is None:
            return content
        name = prep.tool.name
        event = "PostToolUseFailure" if is_error else "PostToolUse"
        common: dict[str, Any] = {
            "tool_name": claude_name(name),
            "tool_input": claude_input(name, prep.args),
            "tool_use_id": prep.call_id,
            "call": (name, prep.tool.kind, prep.args),
        }
        if is_error:
            verdict = await self.fire(event, names_of(name), emit, prep.call_id, **common, error=content)
        else:
            response = {"content": content, "is_error": is_error}
            verdict = await self.fire(event, names_of(name), emit, prep.call_id, **common, tool_response=response)
        if not verdict.context:
            return content
        return content + "\n\n" + "\n".join(f"[{event} hook] {text}" for text in verdict.context)

    def check_stop(self) -> None:
        """Raise HookStop when a hook of this step answered `continue: false`."""
        why = self.stop
        if why is not None:
            self.stop = None
            raise HookStop(f"stopped by a hook: {why}", "hook_stopped")

    async def prompt_submitted(self, prompt: str, emit: Emit) -> list[str]:
        """SessionStart (on the agent's first turn) and UserPromptSubmit hooks: the note carrying what they add
        to the conversation (put before the prompt, agent/modes.py). Raises HookStop when the prompt is blocked."""
        if self.hooks is None or self.agent.extras.subagent:
            return []
        context: list[str] = []
        if not self.session_started:
            self.session_started = True
            source = "resume" if any(m.get("role") == "user" for m in self.agent.messages) else "startup"
            context += (await self.fire("SessionStart", (source,), emit, source=source)).context
        verdict = await self.fire("UserPromptSubmit", (), emit, prompt=prompt)
        self.stop = None
        if verdict.decision == "block" or verdict.stop is not None:
            why = verdict.reason if verdict.decision == "block" else verdict.stop or ""
            raise HookStop(f"a UserPromptSubmit hook blocked the prompt: {why}", "hook_blocked")
        context += verdict.context
        return [hooks_note(context)] if context else []

    async def stop_blocked(self, final: str, emit: Emit) -> str | None:
        """Stop (SubagentStop in a subagent) hooks when the model is done: the reason to carry on, or None."""
        if self.hooks is None:
            return None
        event = "SubagentStop" if self.agent.extras.subagent else "Stop"
        active = self.stop_blocks > 0
        verdict = await self.fire(event, (), emit, stop_hook_active=active, last_assistant_message=final)
        if verdict.decision != "block" or self.stop_blocks >= MAX_STOP_BLOCKS:
            self.stop_blocks = 0
            return None
        self.stop_blocks += 1
        return verdict.reason

    async def notify(self, message: str, kind: str, emit: Emit | None) -> None:
        """Notification hooks (a permission question is about to be shown)."""
        if self.hooks is not None:
            await self.fire("Notification", (kind,), emit, message=message, notification_type=kind)

    async def before_compact(self, reason: str, instructions: str | None, emit: Emit) -> None:
        """PreCompact hooks when a compaction is about to summarise: `manual` for /compact
        (`agent.compact()`), `auto` when the context fills up or the server said it was too long."""
        trigger = "manual" if reason == "manual" else "auto"
        await self.fire("PreCompact", (trigger,), emit, trigger=trigger, custom_instructions=instructions or "")

    async def session_end(self, reason: str) -> None:
        """SessionEnd hooks, once per SessionStart (logged; there is no stream to report to any more)."""
        if self.hooks is None or not self.session_started or self.agent.extras.subagent:
            return
        self.session_started = False
        await self.fire("SessionEnd", (reason,), None, reason=reason)


def _rewrite(prep: Prepared, updated: Mapping[str, Any]) -> str | None:
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


def _combine(decision: Decision, verdict: Verdict, mode: str) -> Decision:
    """A hook's allow turns the mode's question into a yes (never a deny, never a user's `ask` rule, never a
    write to a place that runs later, never in plan mode, where nothing is changed); its ask turns an allow
    into a question."""
    if (
        verdict.decision == "allow"
        and decision.verdict == "ask"
        and not decision.by_rule
        and not decision.firm
        and mode != "plan"
    ):
        return Decision("allow", "allowed by a hook")
    if verdict.decision == "ask" and decision.verdict == "allow":
        return Decision("ask", f"a hook asks: {verdict.reason}")
    return decision


class HookStop(Exception):
    """A hook ended the turn: a UserPromptSubmit hook blocked the prompt (`hook_blocked`), or a hook
    answered `continue: false` (`hook_stopped`). The turn finishes with status `error` and this kind."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def _named_by_condition(
    specs: list[HookSpec], call: tuple[str, str, Mapping[str, Any]], workspace: Path
) -> list[HookSpec]:
    """The hooks of `specs` whose `if` rule (Claude Code's) names the tool call `call` (name, kind, args)."""
    if all(s.condition is None for s in specs):
        return specs
    from kimicode.permissions.claude import call_matches

    name, kind, args = call
    return [s for s in specs if s.condition is None or call_matches(s.condition, name, kind, dict(args), workspace)]
