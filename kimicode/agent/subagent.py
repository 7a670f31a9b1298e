"""task: run a subagent with a fresh context and a restricted tool set, and return its final answer.

A subagent is an Agent of its own: the parent's model, endpoint, workspace, permission mode, rules and
approval callback, but a new history (the system prompt, the project instructions and the task) and by
default only the read-only tools. Several task calls in one step run concurrently (the tool's kind is
`read`; anything a subagent does that needs permission is checked by its own permission layer). A
subagent is cancelled with its parent's turn, and its token usage is added to the parent's totals (and
logged in the parent's session) whether it finishes or not. What it does is visible in the parent: its
tool calls, results and denials reach the parent's events (`SubagentEvent`, with the parent call id), its
session log (`subagent` and `subagent_denial` records) and its `permission_denials`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kimicode.config.choices import DEFAULT_SUBAGENT_TOOLS
from kimicode.prompts import load_prompt
from kimicode.tools.base import CURRENT_CALL_ID, Tool, ToolContext, ToolError, ToolResult

if TYPE_CHECKING:
    from kimicode.agent.core import Agent
    from kimicode.events import Event
    from kimicode.extensions.agents import AgentDef

READ_ONLY = DEFAULT_SUBAGENT_TOOLS
"""A subagent's tools unless the call or `[subagents] tools` asks for others."""
NEVER = ("task", "todo_write")
"""Tools a subagent never gets (no nesting; the task list belongs to the parent)."""


class TaskRunner:
    """The task tool of one parent agent."""

    def __init__(self, parent: Agent) -> None:
        self.parent = parent
        self.running: dict[str, Agent] = {}
        """Subagents currently running, by tool call description (for faces that show them)."""

    def definitions(self) -> dict[str, AgentDef]:
        """The custom subagents (kimicode/extensions/agents.py) the model may name."""
        found = self.parent.extras.found
        return found.agents if found is not None else {}

    def tool(self) -> Tool:
        available = [n for n in self.parent.tools.names if n not in NEVER]
        from kimicode.extensions.agents import agent_parameter

        custom, listing = agent_parameter(self.definitions())
        return Tool(
            name="task",
            description=load_prompt("tools/task.md") + listing,
            parameters={
                "type": "object",
                "properties": {
                    **custom,
                    "description": {"type": "string", "description": "A short label for the job (3-6 words)."},
                    "prompt": {
                        "type": "string",
                        "description": "The complete, self-contained instructions: the subagent sees nothing else.",
                    },
                    "tools": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Tools the subagent may use (default: read_file, glob, grep). "
                        f"Available: {', '.join(available)}.",
                    },
                },
                "required": ["description", "prompt"],
                "additionalProperties": False,
            },
            fn=self._call,
            kind="read",
        )

    def default_tools(self) -> list[str]:
        configured = self.parent.settings.config.subagents.tools
        return list(configured) if configured is not None else list(READ_ONLY)

    def child_tools(self, names: Sequence[str]) -> list[Tool]:
        """The subagent's tools: fresh built-in ones (so it binds and sandboxes them itself), the parent's
        other tools unbound from the parent (they share its MCP connections)."""
        from kimicode.tools.registry import builtin_tools

        builtin = {t.name: t for t in builtin_tools()}
        out: list[Tool] = []
        unknown = [n for n in names if n in NEVER or self.parent.tools.get(n) is None]
        if unknown:
            available = ", ".join(n for n in self.parent.tools.names if n not in NEVER)
            raise ToolError(f"a subagent cannot use {', '.join(unknown)}; available tools: {available}")
        for name in dict.fromkeys(names):
            mine = self.parent.tools.get(name)
            assert mine is not None
            if name in builtin:
                out.append(builtin[name])
            elif getattr(mine.fn, "__self__", None) is not None:
                fn = mine.fn

                async def unbound(args: dict[str, Any], ctx: ToolContext, fn: Any = fn) -> ToolResult | str:
                    result: ToolResult | str = await fn(args, ctx)
                    return result

                out.append(Tool(mine.name, mine.description, mine.parameters, unbound, mine.kind))
            else:
                out.append(mine)
        return out

    def make_child(self, names: Sequence[str], definition: AgentDef | None = None) -> Agent:
        """A subagent of the parent with the tools `names` (and a custom subagent's instructions and model)."""
        from kimicode.extensions.agents import model_for

        p = self.parent
        max_turns = p.settings.config.subagents.max_turns
        instructions = load_prompt("tools/task_system.md")
        model = p.model_config.name
        if definition is not None:
            instructions += f"\n\n# Your role: {definition.name}\n\n{definition.prompt}"
            model = model_for(definition, list(p.settings.config.models), model)
        from kimicode.agent.options import derived_options

        options = derived_options(  # the parent's settings (rules and sandbox included) but its own history
            p,
            model=model,
            append_system_prompt=instructions,
            max_turns=max_turns,
            persist=False,
        )
        child = type(p)(
            options,
            tools=self.child_tools(names),
            approve=p.approve,  # an Agent, as the parent
            client=p.parts.client.given,
        )  # the caller's own client serves its subagents too
        child.parts.client.borrowed = True  # the parent closes the caller's client, not the subagent
        if p.context.server_limit:  # a window the server showed holds for the subagent too
            child.context.learn_window(p.context.server_limit, record=False)
        child.extras.subagent = True  # its Stop hooks are SubagentStop; no session hooks
        # The child keeps no log of its own, but its big tool outputs are saved in the parent's session
        # directory (same disk bound, deleted with the session) rather than losing their middle.
        child.ctx.session_dir = p.ctx.session_dir
        child.context.spill_dir = p.ctx.session_dir
        return child

    def _add_usage(self, child: Agent, description: str) -> None:
        usage = {k: int(child.usage.get(k, 0)) for k in ("prompt_tokens", "completion_tokens", "cached_tokens")}
        if not any(usage.values()):
            return
        for key, value in usage.items():
            self.parent.usage[key] = self.parent.usage.get(key, 0) + value
        if self.parent.log is not None:
            self.parent.log.append(
                {
                    "type": "usage",
                    "subagent": description,
                    "usage": {
                        "prompt_tokens": usage["prompt_tokens"],
                        "completion_tokens": usage["completion_tokens"],
                        "prompt_tokens_details": {"cached_tokens": usage["cached_tokens"]},
                    },
                }
            )

    def _relay(self, parent_call_id: str, description: str) -> Callable[[Event], None]:
        """What the subagent does, made visible in the parent: its tool calls, results and denials go to
        the parent's events (stream-json, the terminal), its session log and its `permission_denials`."""
        from kimicode.events import MessageCommitted, PermissionDenied, SubagentEvent

        parent = self.parent

        def relay(event: Event) -> None:
            if isinstance(event, MessageCommitted) and event.message.get("role") in ("assistant", "tool"):
                if parent.log is not None:
                    parent.log.append(
                        {
                            "type": "subagent",
                            "parent_tool_use_id": parent_call_id,
                            "description": description,
                            "message": dict(event.message),
                        }
                    )
            elif isinstance(event, PermissionDenied):
                denial = {
                    "tool_name": event.name,
                    "tool_use_id": event.call_id,
                    "tool_input": dict(event.arguments),
                    "reason": event.reason,
                    "parent_tool_use_id": parent_call_id,
                }
                parent.turn_denials.append(denial)
                if parent.log is not None:
                    parent.log.append({"type": "subagent_denial", "description": description, **denial})
            else:
                return
            if parent.turn_emit is not None:
                parent.turn_emit(SubagentEvent(parent_call_id, description, event))

        return relay

    async def _call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        description = str(args.get("description") or "subagent").strip()[:80]
        prompt = str(args.get("prompt") or "").strip()
        if not prompt:
            raise ToolError("prompt is empty: give the subagent complete instructions")
        requested = args.get("tools")
        if isinstance(requested, list) and requested:
            names = [str(n) for n in requested]
        else:  # the defaults the parent actually has
            names = [n for n in self.default_tools() if self.parent.tools.get(n) is not None and n not in NEVER]
        definition = self.definitions().get(str(args.get("agent") or "")) if args.get("agent") else None
        if args.get("agent") and definition is None:
            raise ToolError(f"no subagent named {args.get('agent')!r}; available: {', '.join(self.definitions())}")
        if definition is not None:  # its own list, within the parent's tools (and the call's, when it names some)
            names = [
                n
                for n in definition.tool_names([t for t in self.parent.tools.names if t not in NEVER])[0]
                if not (isinstance(requested, list) and requested) or n in requested
            ]
        child = self.make_child(names, definition)
        child.on_event = self._relay(CURRENT_CALL_ID.get(), description)
        key = f"{description}#{id(child)}"
        self.running[key] = child
        started = time.monotonic()
        try:
            result = await child.run(prompt)
        finally:
            self.running.pop(key, None)
            self._add_usage(child, description)
            await child.aclose()
        seconds = time.monotonic() - started
        display = {
            "subagent": {
                "description": description,
                "status": result.status,
                "steps": result.num_turns,
                "tools": names,
                "usage": dict(child.usage),
                "seconds": round(seconds, 1),
            }
        }
        summary = f"task {description}: {result.status}, {result.num_turns} steps"
        if result.ok:
            return ToolResult(content=result.result or "(the subagent finished without a final answer)",
                              summary=summary, display=display)  # fmt: skip
        partial = f"\nIts last message was:\n{result.result}" if result.result else ""
        return ToolResult(
            content=f"The subagent did not finish ({result.status}: {result.error or 'no error message'}).{partial}",
            is_error=True,
            summary=summary,
            display=display,
        )
