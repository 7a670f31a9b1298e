"""Small formatting helpers shared by the terminal views: tool-call lines, diffs, token counts, money."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from rich.text import Text

from kimicode.termsafe import sanitize

DIFF_STYLES = {"+": "green", "-": "red", "@": "cyan"}


def tokens(n: int) -> str:
    """A compact token count: 999, 12.3k, 262k, 1.0M."""
    if n < 1000:
        return str(n)
    if n < 100_000:
        return f"{n / 1000:.1f}k"
    if n < 1_000_000:
        return f"{n // 1000}k"
    return f"{n / 1_000_000:.1f}M"


def money(dollars: float) -> str:
    """A cost in dollars with enough digits to move: $0.0042, $0.042, $4.20."""
    if dollars >= 1:
        return f"${dollars:,.2f}"
    if dollars >= 0.01:
        return f"${dollars:.3f}"
    return f"${dollars:.4f}"


def human_bytes(n: int) -> str:
    """A file size: 512 B, 12 KB, 3.4 MB."""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.0f} KB"
    return f"{n / (1024 * 1024):.1f} MB"


def one_line(text: str, limit: int = 120) -> str:
    """The first line of `text`, shortened to `limit` characters (a `…` marks a cut), terminal-safe."""
    text = sanitize(text, sequences="escape")
    first = text.strip().splitlines()[0] if text.strip() else ""
    more = len(text.strip().splitlines()) > 1
    if len(first) > limit:
        return first[: limit - 1] + "…"
    return first + (" …" if more else "")


def describe_call(name: str, args: Mapping[str, Any], limit: int = 160) -> str:
    """One line saying what a tool call does: `read_file src/app.py:1-200`, `bash: pytest -q`.

    Model-controlled parts are terminal-safe (kimicode.termsafe)."""
    return sanitize(_describe_call(name, args, limit), sequences="escape", newlines=False)


def _describe_work(name: str, args: Mapping[str, Any], limit: int) -> str | None:
    """A todo list, subagent task or command call in a line (None for other calls)."""
    if name == "todo_write" and isinstance(args.get("todos"), list):
        return f"todo_write ({_count(len(args['todos']), 'task')})"
    description = args.get("description")
    if name == "task" and isinstance(description, str):
        return f"task: {one_line(description, limit)}"
    command = args.get("command")
    if isinstance(command, str):
        return f"{name}: {one_line(command, limit)}"
    return None


def _describe_call(name: str, args: Mapping[str, Any], limit: int) -> str:
    path = args.get("path")
    if isinstance(path, str) and name in _FILE_CALLS:
        return _FILE_CALLS[name](path, args)
    if (described := _describe_work(name, args, limit)) is not None:
        return described
    query = args.get("query")
    if name == "web_search" and isinstance(query, str):
        return f"web_search: {one_line(query, limit)}"
    if name == "$web_search":
        return "$web_search on Moonshot's server (the model's query is sent there; kimicode does not see it)"
    pattern = args.get("pattern")
    if name in ("glob", "grep") and isinstance(pattern, str):
        where = f" in {path}" if isinstance(path, str) and path not in ("", ".") else ""
        return f"{name} {pattern}{where}"
    if not args:
        return name
    shown = json.dumps(dict(args), ensure_ascii=False)
    if len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return f"{name} {shown}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _read_call(path: str, args: Mapping[str, Any]) -> str:
    offset, limit_lines = args.get("offset"), args.get("limit")
    if not isinstance(offset, int) and not isinstance(limit_lines, int):
        return f"read_file {path}"
    start = offset if isinstance(offset, int) else 1
    end = f"{start + limit_lines - 1}" if isinstance(limit_lines, int) else ""
    return f"read_file {path}:{start}-{end}"


def _write_call(path: str, args: Mapping[str, Any]) -> str:
    content = args.get("content")
    lines = 0
    if isinstance(content, str):
        lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    return f"write_file {path} ({_count(lines, 'line')})"


def _edit_call(path: str, args: Mapping[str, Any]) -> str:
    return f"edit_file {path}" + (" (all occurrences)" if args.get("replace_all") else "")


_FILE_CALLS: dict[str, Callable[[str, Mapping[str, Any]], str]] = {
    "read_file": _read_call,
    "write_file": _write_call,
    "edit_file": _edit_call,
}
"""The file tools' one-line descriptions, by tool name (given a string `path`)."""


def diff_text(diff: str, max_lines: int | None = 60, indent: str = "    ", headers: bool = True) -> Text:
    """A unified diff as coloured text (added green, removed red, hunks cyan), cut after `max_lines`.

    `headers=False` drops the `---`/`+++` file lines (when the path is shown already).
    """
    lines = sanitize(diff, sequences="escape").splitlines()
    if not headers:
        lines = [line for line in lines if not line.startswith(("--- ", "+++ "))]
    out = Text()
    shown = lines if max_lines is None else lines[:max_lines]
    for line in shown:
        style = "bold" if line.startswith(("+++", "---")) else DIFF_STYLES.get(line[:1], "")
        out.append(indent)
        out.append(line, style=style)
        out.append("\n")
    if max_lines is not None and len(lines) > max_lines:
        out.append(f"{indent}… {len(lines) - max_lines} more diff lines\n", style="dim")
    out.rstrip()
    return out


def tail(text: str, n: int, width: int = 200) -> list[str]:
    """The last `n` non-empty lines of `text`, each cut to `width` characters."""
    lines = [line.rstrip() for line in sanitize(text).rstrip().splitlines() if line.strip()]
    return [line if len(line) <= width else line[: width - 1] + "…" for line in lines[-n:]]


_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[\]P^_][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?|[\x00-\x08\x0b-\x1f\x7f]"
)
"""Escape sequences and control characters: command output must not move the cursor or recolour the terminal."""


def printable(line: str) -> str:
    """One line of command output made safe to print: a `\r` progress bar keeps its last state, escape
    sequences and control characters are removed, tabs become spaces."""
    if "\r" in line:
        parts = [p for p in line.split("\r") if p]
        line = parts[-1] if parts else ""
    return _CONTROL.sub("", line.expandtabs(4))


def tail_with_hidden(text: str, n: int, width: int = 200) -> tuple[list[str], int]:
    """The last `n` non-empty lines of `text` (made `printable`, cut to `width`) and how many lines come
    before them (the lines a shortened view hides, blank ones included)."""
    rows = text.rstrip().splitlines()
    keep = [i for i, row in enumerate(rows) if printable(row).strip()][-n:]
    if not keep:
        return [], 0
    shown = [printable(rows[i]).rstrip() for i in keep]
    return [line if len(line) <= width else line[: width - 1] + "…" for line in shown], keep[0]


def more_lines(hidden: int, indent: str = "    ", key: str = "") -> str:
    """`… 12 more lines` (with the key that shows them, if any)."""
    return f"{indent}… {hidden} more line{'s' if hidden != 1 else ''}" + (f" ({key} to expand)" if key else "")


def elapsed(seconds: float) -> str:
    """`12s`, `3m04s`."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    return f"{s // 60}m{s % 60:02d}s"
