"""todo_write: the model's task list for multi-step work.

The list lives on the agent (`agent.extras.todos`); each call replaces it whole. It survives a resume
(rebuilt from the session log's `todos` records, else from the last todo_write call in the history) and
a compaction (the agent re-injects the current list into the summary). Faces render it from the
`display={"todos": [...]}` of each result.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from kimicode.prompts import load_prompt
from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult

STATUSES = ("pending", "in_progress", "done")
MAX_ITEMS = 100
MAX_CONTENT = 500
_MARKS = {"pending": "[ ]", "in_progress": "[>]", "done": "[x]"}


@dataclass(frozen=True)
class TodoItem:
    """One task: a stable id, what to do, and pending / in_progress / done."""

    id: str
    content: str
    status: str


class TodoList:
    """The current list and the hook that records each change (the session log)."""

    def __init__(self, items: Iterable[TodoItem] = ()) -> None:
        self.items: list[TodoItem] = list(items)
        self.record: Callable[[list[dict[str, str]]], None] | None = None
        """Called with the new list after each change (the agent appends it to its session log)."""

    def as_dicts(self) -> list[dict[str, str]]:
        return [asdict(item) for item in self.items]

    def render(self) -> str:
        """The list as the model and plain-text faces see it."""
        if not self.items:
            return "(the task list is empty)"
        done = sum(1 for i in self.items if i.status == "done")
        lines = [f"Task list ({done}/{len(self.items)} done):"]
        lines.extend(f"{_MARKS.get(i.status, '[ ]')} {i.id}. {i.content}" for i in self.items)
        return "\n".join(lines)

    def replace(self, raw: Sequence[Any]) -> None:
        """Validate and set a new list; raise ToolError saying what is wrong."""
        self.items = parse_items(raw)
        if self.record is not None:
            self.record(self.as_dicts())

    @classmethod
    def from_history(cls, messages: Sequence[Mapping[str, Any]], records: Iterable[Mapping[str, Any]] = ()) -> TodoList:
        """The list as the last successful change left it: from the session log's records if it has one,
        else from the last todo_write call in `messages` whose result was not an error."""
        found = _from_records(records)
        if found is not None:
            return cls(found)
        results = {str(m.get("tool_call_id")): str(m.get("content") or "") for m in messages if m.get("role") == "tool"}
        for msg in reversed(messages):
            if msg.get("role") != "assistant":
                continue
            for call in reversed(list(msg.get("tool_calls") or ())):
                fn = call.get("function") or {}
                if fn.get("name") != "todo_write" or results.get(str(call.get("id")), "").startswith("Error"):
                    continue
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                    return cls(parse_items(args.get("todos", [])))
                except (ValueError, ToolError, AttributeError):
                    continue
        return cls()

    def tool(self) -> Tool:
        """The todo_write tool bound to this list."""
        return Tool(
            name="todo_write",
            description=load_prompt("tools/todo_write.md"),
            parameters=TODO_PARAMETERS,
            fn=self._call,
            kind="other",
        )

    async def _call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        self.replace(args.get("todos", []))
        return ToolResult(
            content=self.render(),
            summary=f"todos: {sum(1 for i in self.items if i.status == 'done')}/{len(self.items)} done",
            display={"todos": self.as_dicts()},
        )


def parse_items(raw: Any) -> list[TodoItem]:
    """Check a list of `{id, content, status}` objects; raise ToolError naming the first problem."""
    if not isinstance(raw, list):
        raise ToolError("todos must be a list of {id, content, status} objects")
    if len(raw) > MAX_ITEMS:
        raise ToolError(f"too many tasks ({len(raw)}); keep the list under {MAX_ITEMS}")
    items: list[TodoItem] = []
    seen: set[str] = set()
    for n, entry in enumerate(raw, 1):
        if not isinstance(entry, dict):
            raise ToolError(f"task {n} must be an object with id, content and status")
        tid = str(entry.get("id", n)).strip() or str(n)
        content = str(entry.get("content") or "").strip()
        status = entry.get("status", "pending")
        if not content:
            raise ToolError(f"task {tid}: content is empty")
        if status not in STATUSES:
            raise ToolError(f"task {tid}: status must be one of {', '.join(STATUSES)} (got {status!r})")
        if tid in seen:
            raise ToolError(f"task id {tid!r} appears twice; ids must be unique")
        seen.add(tid)
        items.append(TodoItem(tid, " ".join(content.split())[:MAX_CONTENT], status))
    return items


def _from_records(records: Iterable[Mapping[str, Any]]) -> list[TodoItem] | None:
    """The items of the last `{"type": "todos"}` record of a session log, or None."""
    last: Any = None
    for record in records:
        if record.get("type") == "todos":
            last = record.get("items")
    try:
        return parse_items(last) if last is not None else None
    except (ValueError, ToolError):
        return None


TODO_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "description": "The complete task list (it replaces the previous one).",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "A short stable id, e.g. '1'."},
                    "content": {"type": "string", "description": "The task, in one line."},
                    "status": {"type": "string", "enum": list(STATUSES)},
                },
                "required": ["id", "content", "status"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["todos"],
    "additionalProperties": False,
}
