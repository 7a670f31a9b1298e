"""The core's events as ACP session updates: message and thought chunks, tool calls, diffs, the plan.

`Translator.updates(event)` maps one typed event (kimicode/events.py) to the `session/update` payloads an
editor shows; `replay(messages)` does the same for a saved history (`session/load`). Pure functions of
their input, so both are tested without a connection.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from acp import (
    plan_entry,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
    update_user_message,
    update_user_message_text,
)
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    ContentToolCallContent,
    FileEditToolCallContent,
    ImageContentBlock,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolKind,
    UserMessageChunk,
)

from kimicode.events import (
    ContentDelta,
    Event,
    MessageCommitted,
    Notice,
    ReasoningDelta,
    Retrying,
    ToolCallFinished,
    ToolCallStarted,
    ToolOutputDelta,
)

Update = AgentMessageChunk | AgentThoughtChunk | UserMessageChunk | ToolCallStart | ToolCallProgress | AgentPlanUpdate

ACP_KINDS: Mapping[str, ToolKind] = {
    "read_file": "read",
    "glob": "search",
    "grep": "search",
    "write_file": "edit",
    "edit_file": "edit",
    "apply_patch": "edit",
    "bash": "execute",
    "web_fetch": "fetch",
    "web_search": "fetch",
    "todo_write": "think",
}
"""The built-in tools' ACP kinds; other tools get theirs from their kimicode kind (`read`, `edit`, `execute`)."""

MAX_SHOWN_CHARS = 8000
"""A tool result shown in the editor is cut here (the model got the whole, capped result)."""
LIVE_EVERY = 0.25
"""Seconds between two updates of a running command's output (the last LIVE_CHARS of it)."""
LIVE_CHARS = 4000

PlanStatus = Literal["pending", "in_progress", "completed"]
PLAN_STATUS: dict[str, PlanStatus] = {"pending": "pending", "in_progress": "in_progress", "done": "completed"}


def acp_kind(name: str, kind: str) -> ToolKind:
    """The ACP tool kind for a kimicode tool `name` of kimicode kind `kind`."""
    if name in ACP_KINDS:
        return ACP_KINDS[name]
    return kind if kind in ("read", "edit", "execute") else "other"  # type: ignore[return-value]


def tool_title(name: str, args: Mapping[str, Any]) -> str:
    """What the editor shows as the call's title: `Read src/app.py`, `bash: pytest -q`, `grep TODO`."""
    command = args.get("command")
    if isinstance(command, str) and command.strip():
        first = command.strip().splitlines()[0]
        return f"{name}: {first[:120]}"
    for key in ("path", "pattern", "url", "query", "description"):
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            verb = {"read_file": "Read", "write_file": "Write", "edit_file": "Edit"}.get(name, name)
            return f"{verb} {value.strip()[:160]}"
    return name


def absolute(path: str, workspace: Path) -> str:
    """`path` (as the model wrote it, or as a tool shows it) made absolute against the workspace."""
    p = Path(path).expanduser()
    return os.path.normpath(p if p.is_absolute() else workspace / p)


def tool_locations(args: Mapping[str, Any], workspace: Path) -> list[ToolCallLocation]:
    """The files a call works on, for the editor's "follow the agent"."""
    out: list[ToolCallLocation] = []
    for key in ("path", "file_path"):
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            line = args.get("offset")
            out.append(
                ToolCallLocation(
                    path=absolute(value, workspace), line=line if isinstance(line, int) and line > 0 else None
                )
            )
    return out


def diff_contents(diff: str, path: str) -> list[FileEditToolCallContent]:
    """A unified diff (as the edit tools compute it) as ACP diff contents, one per hunk: the hunk's old
    and new lines with their context. A created file has no old text."""
    created = diff.startswith("--- /dev/null")
    out: list[FileEditToolCallContent] = []
    old: list[str] = []
    new: list[str] = []
    in_hunk = False

    def flush() -> None:
        if old or new:
            out.append(tool_diff_content(path, "\n".join(new), None if created else "\n".join(old)))
        old.clear()
        new.clear()

    for line in diff.splitlines():
        if line.startswith("@@"):
            flush()
            in_hunk = True
            continue
        if not in_hunk or line.startswith("\\"):
            continue
        tag, body = line[:1], line[1:]
        if tag in (" ", "-"):
            old.append(body)
        if tag in (" ", "+"):
            new.append(body)
    flush()
    return out


def text_content(text: str) -> ContentToolCallContent:
    """A tool result as text content, cut for display to its head and its tail: a long command's last lines
    and its `[exit code: N]` line (where a failing build says why) stay in view."""
    if len(text) > MAX_SHOWN_CHARS:
        head, tail = text[: MAX_SHOWN_CHARS // 2], text[-MAX_SHOWN_CHARS // 2 :]
        text = f"{head}\n… [{len(text) - len(head) - len(tail)} characters not shown] …\n{tail}"
    return tool_content(text_block(text))


def plan_update(todos: Sequence[Mapping[str, Any]]) -> AgentPlanUpdate:
    """The todo list as the ACP plan (every entry medium priority: kimicode's list has no priorities)."""
    return update_plan(
        plan_entry(
            str(t.get("content", "")), priority="medium", status=PLAN_STATUS.get(str(t.get("status")), "pending")
        )
        for t in todos
    )


def parse_arguments(raw: Any) -> dict[str, Any]:
    """A tool call's JSON arguments as a dict ({} when they are not a JSON object)."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class Translator:
    """Turns one session's events into ACP updates. `kind_of(name)` gives a tool's kimicode kind."""

    def __init__(self, workspace: Path, kind_of: Callable[[str], str]) -> None:
        self.workspace = workspace
        self.kind_of = kind_of
        self.calls: dict[str, tuple[str, dict[str, Any]]] = {}
        """Tool calls announced so far: id -> (name, arguments)."""
        self.live: dict[str, tuple[str, float]] = {}
        """A running command's output so far and when it was last shown."""
        self.clock = time.monotonic

    def call_start(self, call: Mapping[str, Any], status: str = "pending") -> ToolCallStart:
        """The `tool_call` update announcing one call of an assistant message."""
        fn = call.get("function") or {}
        name = str(fn.get("name") or "")
        args = parse_arguments(fn.get("arguments"))
        call_id = str(call.get("id") or "")
        self.calls[call_id] = (name, args)
        return start_tool_call(
            call_id,
            tool_title(name, args),
            kind=acp_kind(name, self.kind_of(name)),
            status=status,  # type: ignore[arg-type]
            locations=tool_locations(args, self.workspace),
            raw_input=args,
        )

    def finished(self, call_id: str, content: str, is_error: bool, display: Mapping[str, Any] | None) -> list[Update]:
        """The updates for a call's result: its status and what it did (a diff for an edit), and the plan
        when the todo list changed."""
        out: list[Update] = []
        shown: list[Any] = []
        if display and isinstance(display.get("diff"), str) and display.get("diff") and not is_error:
            shown.extend(diff_contents(str(display["diff"]), absolute(str(display.get("path") or ""), self.workspace)))
        if not shown:
            shown.append(text_content(content))
        out.append(update_tool_call(call_id, status="failed" if is_error else "completed", content=shown))
        if display and isinstance(display.get("todos"), list):
            out.append(plan_update(display["todos"]))
        return out

    def output(self, call_id: str, text: str) -> list[Update]:
        """A running command's output, shown in its tool call at most every LIVE_EVERY seconds (its tail)."""
        seen, shown_at = self.live.get(call_id, ("", 0.0))
        seen = (seen + text)[-LIVE_CHARS:]
        now = self.clock()
        if now - shown_at < LIVE_EVERY:
            self.live[call_id] = (seen, shown_at)
            return []
        self.live[call_id] = (seen, now)
        return [update_tool_call(call_id, content=[tool_content(text_block(seen))])]

    def updates(self, ev: Event) -> list[Update]:
        """The updates for one event (none for events an editor has no place for)."""
        if isinstance(ev, ContentDelta):
            return [update_agent_message_text(ev.text)] if ev.text else []
        if isinstance(ev, ReasoningDelta):
            return [update_agent_thought_text(ev.text)] if ev.text else []
        if isinstance(ev, MessageCommitted):
            if ev.message.get("role") == "assistant":
                return [self.call_start(c) for c in ev.message.get("tool_calls") or ()]
            return []
        if isinstance(ev, ToolCallStarted):
            return [update_tool_call(ev.call_id, status="in_progress")]
        if isinstance(ev, ToolOutputDelta):
            return self.output(ev.call_id, ev.text)
        if isinstance(ev, ToolCallFinished):
            self.live.pop(ev.call_id, None)
            return self.finished(ev.call_id, ev.content, ev.is_error, ev.display)
        if isinstance(ev, Retrying):
            return [update_agent_thought_text(f"\n[kimicode: retry {ev.attempt}/{ev.max_retries} after: {ev.error}]\n")]
        if isinstance(ev, Notice) and ev.level != "info":
            return [update_agent_thought_text(f"\n[kimicode {ev.level}: {ev.text}]\n")]
        return []

    def replay(self, messages: Iterable[Mapping[str, Any]]) -> list[Update]:
        """A saved history as the updates that would have shown it (`session/load`)."""
        out: list[Update] = []
        for message in messages:
            role = message.get("role")
            content = message.get("content")
            if role == "user":
                out.extend(_user_chunks(content))
            elif role == "assistant":
                reasoning = message.get("reasoning_content") or message.get("reasoning")
                if isinstance(reasoning, str) and reasoning:
                    out.append(update_agent_thought_text(reasoning))
                if isinstance(content, str) and content:
                    out.append(update_agent_message_text(content))
                out.extend(self.call_start(c) for c in message.get("tool_calls") or ())
            elif role == "tool":
                text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
                failed = text.startswith("Error:") or text.startswith("Not run:")
                out.extend(self.finished(str(message.get("tool_call_id") or ""), text, failed, None))
        return out


def _user_chunks(content: Any) -> list[Update]:
    if isinstance(content, str):
        return [update_user_message_text(content)] if content else []
    out: list[Update] = []
    for part in content or ():
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "text" and part.get("text"):
            out.append(update_user_message_text(str(part["text"])))
        elif part.get("type") == "image_url":
            url = str((part.get("image_url") or {}).get("url") or "")
            head, _, data = url.partition(",")
            if head.startswith("data:") and data:
                mime = head[5:].split(";", 1)[0]
                out.append(update_user_message(ImageContentBlock(type="image", data=data, mime_type=mime)))
    return out
