"""The one place that decides whether a tool call may run, before it runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kimicode.tools.base import Tool, ToolContext

PermissionMode = Literal["default", "accept-edits", "yolo"]
MODES: tuple[PermissionMode, ...] = ("default", "accept-edits", "yolo")


@dataclass(frozen=True)
class Decision:
    """`allow` runs, `ask` needs the user's (or the approval callback's) yes, `deny` never runs."""

    verdict: Literal["allow", "ask", "deny"]
    reason: str = ""


def target_path(tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> str | None:
    """The file an edit tool would change, resolved, or None."""
    raw = args.get("path")
    if tool.kind == "edit" and isinstance(raw, str):
        return str(ctx.resolve(raw))
    return None


def decide(tool: Tool, args: Mapping[str, Any], mode: str, ctx: ToolContext) -> Decision:
    """Apply the permission mode to one call.

    - `yolo`: everything runs.
    - `accept-edits`: reads, and file edits inside the workspace, run; commands and edits outside ask.
    - `default`: reads run; edits and commands ask.
    Tools of kind `other` (the user's own library tools) run in every mode.
    """
    if mode == "yolo" or tool.kind in ("read", "other"):
        return Decision("allow")
    if tool.kind == "edit":
        path = target_path(tool, args, ctx)
        if mode == "accept-edits":
            if path is not None and ctx.is_inside(ctx.resolve(path)):
                return Decision("allow")
            return Decision("ask", f"{tool.name} would write outside the workspace ({path})")
        return Decision("ask", f"{tool.name} changes files (permission mode {mode!r})")
    return Decision("ask", f"{tool.name} runs commands (permission mode {mode!r})")


def denial_message(tool: Tool, mode: str, reason: str, headless: bool) -> str:
    """What the model is told when a call is refused, including how the user could allow it."""
    if headless:
        how = (
            "the user can allow file edits with --permission-mode accept-edits, or everything with --yolo"
            if tool.kind == "edit"
            else "the user can allow commands with --yolo (--permission-mode yolo)"
        )
        return (
            f"Permission denied: {reason}. This is a non-interactive run, so nothing could be approved; "
            f"{how}. Do not retry this call; continue without it or explain what you need."
        )
    return f"Permission denied by the user: {reason}."
