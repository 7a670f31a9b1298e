"""kimicode's tool names and arguments as Claude Code's hooks know them, and back.

A hook written for Claude Code matches `Bash`, `Edit|Write` or `mcp__github__.*` and reads
`tool_input.file_path`; kimicode's tools are `bash`, `edit_file` and `path`. The payload a hook receives
names the tool as Claude Code does (when it has a counterpart) and carries both spellings of the
arguments; a matcher may use either name; an `updatedInput` may use either spelling.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CLAUDE_NAMES: dict[str, str] = {
    "bash": "Bash",
    "read_file": "Read",
    "write_file": "Write",
    "edit_file": "Edit",
    "apply_patch": "Edit",
    "glob": "Glob",
    "grep": "Grep",
    "web_fetch": "WebFetch",
    "task": "Task",
    "todo_write": "TodoWrite",
    "skill": "Skill",
}
"""kimicode's tool → Claude Code's tool of the same purpose (apply_patch edits files: `Edit`)."""

KIMI_NAMES: dict[str, tuple[str, ...]] = {
    "bash": ("Shell",),
    "read_file": ("ReadFile",),
    "write_file": ("WriteFile",),
    "edit_file": ("StrReplaceFile",),
    "apply_patch": ("StrReplaceFile",),
    "web_fetch": ("FetchURL",),
}
"""kimicode's tool → Kimi Code's names for it (older Kimi CLI), which matchers may use too."""

_RENAMED_ARGS: dict[str, dict[str, str]] = {
    "read_file": {"path": "file_path"},
    "write_file": {"path": "file_path"},
    "edit_file": {"path": "file_path"},
}
"""kimicode argument → Claude Code argument, per tool (the others are spelled alike)."""


def claude_name(tool: str) -> str:
    """The name a Claude Code hook expects for kimicode's `tool` (MCP tools are spelled alike)."""
    return CLAUDE_NAMES.get(tool, tool)


def names_of(tool: str) -> tuple[str, ...]:
    """Every name a matcher may use for `tool`: kimicode's, Claude Code's and Kimi Code's."""
    other = CLAUDE_NAMES.get(tool)
    return (tool, *((other,) if other and other != tool else ()), *KIMI_NAMES.get(tool, ()))


def claude_input(tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments with Claude Code's spelling added beside kimicode's (`file_path` beside `path`)."""
    out = dict(args)
    for mine, theirs in _RENAMED_ARGS.get(tool, {}).items():
        if mine in args:
            out[theirs] = args[mine]
    return out


def from_claude_input(tool: str, updated: Mapping[str, Any], original: Mapping[str, Any]) -> dict[str, Any]:
    """A hook's `updatedInput` in kimicode's spelling: a Claude Code name wins over a stale kimicode one,
    and the added Claude Code spellings are dropped again."""
    out = dict(updated)
    for mine, theirs in _RENAMED_ARGS.get(tool, {}).items():
        if theirs in out:
            value = out.pop(theirs)
            if mine not in out or out[mine] == original.get(mine):
                out[mine] = value
    return out
