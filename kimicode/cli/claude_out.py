"""Claude protocol mode, part 2: kimicode's events written as Claude Code's stream-json messages.

`system`/`init` at each turn's start; `assistant` messages with content blocks (`thinking` with the
reasoning verbatim, `text`, `tool_use`); `user` messages with `tool_result` blocks; `stream_event` lines
(Anthropic's raw stream events: `message_start`, `content_block_*`, `message_delta`, `message_stop`) with
`--include-partial-messages`; `system` lines for retries (`api_retry`), notices and hook runs; the
`result` line with Claude's `subtype`, `is_error`, `duration_api_ms`, `usage` and `total_cost_usd`.

Tools keep kimicode's names and arguments (`bash` with `command`, `read_file` with `path`): the model
called them so, the session log has them so, and an answer (`updatedInput`) comes back in them.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any

from kimicode._version import __version__
from kimicode.events import (
    ContentDelta,
    Event,
    HookRan,
    MessageCommitted,
    Notice,
    ReasoningDelta,
    Retrying,
    StepStarted,
    SubagentEvent,
    ToolCallFinished,
    TurnFinished,
    UsageUpdated,
)

if TYPE_CHECKING:
    from kimicode.agent.core import Agent
    from kimicode.config.redact import Masker

CLAUDE_CODE_VERSION = "2.1.0"
"""The Claude Code version the init message reports (the SDKs warn below their minimum); kimicode's own
version is beside it as `kimicode_version`."""
SUBTYPES = {
    "success": "success",
    "max_turns": "error_max_turns",
    "repeat_limit": "error_max_turns",
    "budget": "error_max_budget_usd",
    "invalid_output": "error_max_structured_output_retries",
}
"""kimicode's turn status → Claude's result subtype (anything else: `error_during_execution`)."""


def new_id() -> str:
    return str(uuid.uuid4())


def reasoning_of(message: Mapping[str, Any]) -> str:
    """The reasoning text of an assistant message, whichever field the server used."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def content_blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An OpenAI-shaped assistant message as Claude's content blocks: thinking, text, tool_use."""
    blocks: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    content = message.get("content")
    if isinstance(content, str) and content:
        blocks.append({"type": "text", "text": content})
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        raw = str(fn.get("arguments") or "")
        try:
            args = json.loads(raw) if raw.strip() else {}
        except ValueError:
            args = None
        if not isinstance(args, dict):
            args = {"arguments": raw}  # what the model wrote, unparsed: its call failed with that error
        blocks.append(
            {"type": "tool_use", "id": str(call.get("id") or ""), "name": str(fn.get("name") or ""), "input": args}
        )
    return blocks


def result_content(content: Any) -> str | list[dict[str, Any]]:
    """A tool message's content as a tool_result's (text, or text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return [
            {"type": "text", "text": str(p.get("text") or "")}
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        ]
    return str(content or "")


def claude_usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    """kimicode's token counts in Claude's usage shape (input_tokens excludes the cache reads)."""
    return {
        "input_tokens": max(prompt - cached, 0),
        "output_tokens": completion,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }


class ClaudeWriter:
    """Writes one Claude stream-json line per message; follows a turn's events to shape them."""

    def __init__(self, session_id: str, model: str, *, partial: bool = False, out: IO[str] | None = None) -> None:
        self.session_id = session_id
        self.model = model
        self.partial = partial
        self.out = out or sys.stdout
        self.masker: Masker | None = None
        self.errors: dict[str, bool] = {}
        """is_error of each finished tool call, by call id (the tool message itself does not say)."""
        self.api_ms = 0.0
        self._step_started: float | None = None
        self._last_usage: dict[str, Any] = claude_usage(0, 0, 0)
        self._message_id = ""
        self._open = False
        self._block: str | None = None
        self._index = -1

    def line(self, obj: dict[str, Any]) -> None:
        text = json.dumps(obj, ensure_ascii=False)
        self.out.write((self.masker.mask(text) if self.masker is not None else text) + "\n")
        self.out.flush()

    def init(self, agent: Agent, *, mcp_servers: list[dict[str, str]], ignored: list[str]) -> None:
        """The `system`/`init` message (Claude writes it at the start of each turn)."""
        from kimicode.cli.claude_args import KIMICODE_TO_CLAUDE

        self.session_id = agent.session_id
        self.model = agent.endpoint.model
        self.line(
            {
                "type": "system",
                "subtype": "init",
                "cwd": str(agent.workspace),
                "session_id": agent.session_id,
                "tools": agent.tools.names,
                "mcp_servers": mcp_servers,
                "model": agent.endpoint.model,
                "permissionMode": KIMICODE_TO_CLAUDE.get(agent.permission_mode, agent.permission_mode),
                "slash_commands": [],
                "apiKeySource": "none",
                "claude_code_version": CLAUDE_CODE_VERSION,
                "kimicode_version": __version__,
                "output_style": "default",
                "agents": [],
                "skills": [],
                "plugins": [],
                "kimicode_ignored": ignored,
                "uuid": new_id(),
            }
        )

    # -- events --------------------------------------------------------------------------------------

    def event(self, ev: Event) -> None:
        if isinstance(ev, StepStarted):
            self._step_started = time.monotonic()
        elif isinstance(ev, ReasoningDelta | ContentDelta):
            self._delta(ev)
        elif isinstance(ev, UsageUpdated):
            self._last_usage = claude_usage(ev.prompt_tokens, ev.completion_tokens, ev.cached_tokens)
        elif isinstance(ev, ToolCallFinished):
            self.errors[ev.call_id] = ev.is_error
        elif isinstance(ev, MessageCommitted):
            self._committed(ev.message, None)
        elif isinstance(ev, SubagentEvent) and isinstance(ev.event, MessageCommitted):
            self._committed(ev.event.message, ev.parent_call_id)
        elif isinstance(ev, Retrying):
            self._close_message(None)
            self.line(
                {
                    "type": "system",
                    "subtype": "api_retry",
                    "attempt": ev.attempt,
                    "max_retries": ev.max_retries,
                    "retry_delay_ms": int(ev.delay * 1000),
                    "error_status": None,
                    "error": ev.error,
                    "session_id": self.session_id,
                    "uuid": new_id(),
                }
            )
        elif isinstance(ev, Notice):
            self.line(
                {
                    "type": "system",
                    "subtype": "notice",
                    "level": ev.level,
                    "text": ev.text,
                    "session_id": self.session_id,
                    "uuid": new_id(),
                }
            )
        elif isinstance(ev, HookRan):
            self.line(
                {
                    "type": "system",
                    "subtype": "hook_response",
                    "hook_event": ev.hook_event,
                    "hook_name": ev.hook_event,
                    "command": ev.command,
                    "outcome": ev.outcome,
                    "exit_code": ev.exit_code,
                    "output": ev.message,
                    "tool_use_id": ev.call_id,
                    "session_id": self.session_id,
                    "uuid": new_id(),
                }
            )

    def _stream(self, event: dict[str, Any]) -> None:
        self.line(
            {
                "type": "stream_event",
                "uuid": new_id(),
                "session_id": self.session_id,
                "event": event,
                "parent_tool_use_id": None,
            }
        )

    def _delta(self, ev: ReasoningDelta | ContentDelta) -> None:
        if not self.partial:
            return
        kind = "thinking" if isinstance(ev, ReasoningDelta) else "text"
        if not self._open:
            self._message_id = "msg_" + uuid.uuid4().hex[:24]
            self._open = True
            self._stream(
                {
                    "type": "message_start",
                    "message": {
                        "id": self._message_id,
                        "type": "message",
                        "role": "assistant",
                        "model": self.model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": claude_usage(0, 0, 0),
                    },
                }
            )
        if self._block != kind:
            self._close_block()
            self._index += 1
            self._block = kind
            start = (
                {"type": "thinking", "thinking": "", "signature": ""}
                if kind == "thinking"
                else {"type": "text", "text": ""}
            )
            self._stream({"type": "content_block_start", "index": self._index, "content_block": start})
        delta = (
            {"type": "thinking_delta", "thinking": ev.text}
            if kind == "thinking"
            else {"type": "text_delta", "text": ev.text}
        )
        self._stream({"type": "content_block_delta", "index": self._index, "delta": delta})

    def _close_block(self) -> None:
        if self._block is not None:
            self._stream({"type": "content_block_stop", "index": self._index})
            self._block = None

    def _close_message(self, stop_reason: str | None) -> None:
        if not self._open:
            return
        self._close_block()
        self._stream(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": self._last_usage["output_tokens"]},
            }
        )
        self._stream({"type": "message_stop"})
        self._open = False
        self._index = -1

    def _committed(self, message: Mapping[str, Any], parent: str | None) -> None:
        role = message.get("role")
        if role == "assistant":
            stop = "tool_use" if message.get("tool_calls") else "end_turn"
            if parent is None:
                self._close_message(stop)
                if self._step_started is not None:
                    self.api_ms += (time.monotonic() - self._step_started) * 1000
                    self._step_started = None
            self.line(
                {
                    "type": "assistant",
                    "message": {
                        "id": self._message_id or "msg_" + uuid.uuid4().hex[:24],
                        "type": "message",
                        "role": "assistant",
                        "model": self.model,
                        "content": content_blocks(message),
                        "stop_reason": stop,
                        "stop_sequence": None,
                        "usage": self._last_usage,
                    },
                    "parent_tool_use_id": parent,
                    "session_id": self.session_id,
                    "uuid": new_id(),
                }
            )
            self._message_id = ""
        elif role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            content = result_content(message.get("content"))
            is_error = self.errors.pop(call_id, False)
            self.line(
                {
                    "type": "user",
                    "message": {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error}
                        ],
                    },
                    "parent_tool_use_id": parent,
                    "session_id": self.session_id,
                    "uuid": new_id(),
                    "tool_use_result": content if isinstance(content, str) else None,
                }
            )

    # -- the end of a turn -------------------------------------------------------------------------

    def result(
        self,
        agent: Agent,
        finished: TurnFinished,
        *,
        status: str,
        error: str | None,
        duration_ms: int,
        usage: dict[str, Any],
        structured: tuple[bool, Any] | None = None,
    ) -> dict[str, Any]:
        """The `result` line of a turn (`status` may differ from the turn's: `budget`, `invalid_output`)."""
        from kimicode.agent.costs import session_cost

        self._close_message(None)
        cost = session_cost(agent)
        obj: dict[str, Any] = {
            "type": "result",
            "subtype": SUBTYPES.get(status, "error_during_execution"),
            "is_error": status != "success",
            "duration_ms": duration_ms,
            "duration_api_ms": int(self.api_ms),
            "num_turns": finished.num_steps,
            "result": finished.result,
            "session_id": agent.session_id,
            "total_cost_usd": round(cost, 6) if cost is not None else None,
            "usage": claude_usage(
                usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0), usage.get("cached_tokens", 0)
            ),
            "modelUsage": {},
            "permission_denials": [
                {
                    "tool_name": d.get("tool_name"),
                    "tool_use_id": d.get("tool_use_id"),
                    "tool_input": d.get("tool_input"),
                }
                for d in finished.permission_denials
            ],
            "stop_reason": "end_turn" if status == "success" else None,
            "kimicode_status": status,
            "uuid": new_id(),
        }
        if error:
            obj["errors"] = [error]
        if structured is not None:
            obj["structured_output"] = structured[1] if structured[0] else None
        self.api_ms = 0.0
        self.line(obj)
        return obj
