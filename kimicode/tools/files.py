"""File tools: write_file and edit_file (read_file lives in `readfile.py`).

Reading streams the file in bounded blocks so a 1 GB log or a 10 MB single-line file never has to
fit in memory. Writing and editing are byte-exact (no newline translation, non-UTF-8 bytes survive an
edit via surrogateescape) and atomic (temp file in the same directory, then `os.replace`, keeping the
original mode bits). Edits refuse to touch a file that changed on disk since the agent last read it.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimicode.prompts import load_prompt
from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult
from kimicode.tools.fileio import (
    LINE_NUMBER_PREFIX,
    MAX_DIFF_BYTES,
    MAX_EDIT_BYTES,
    check_fresh,
    check_regular,
    count_lines,
    not_found,
    numbered_lines,
    os_error,
    read_bytes,
    shown_path,
    stat_or_none,
    unified_diff,
    write_bytes,
)
from kimicode.tools.readfile import READ_FILE

__all__ = ["EDIT_FILE", "READ_FILE", "WRITE_FILE"]

# --------------------------------------------------------------------------------------------------
# write_file


def _plan_write(
    ctx: ToolContext, path: Path, shown: str, content: str
) -> tuple[os.stat_result | None, bytes | None, bytes]:
    """What write_file would do, without doing it: (the file's stat or None, its bytes or None when too
    large to diff, the new bytes). Raises ToolError for what would make the write fail."""
    st = stat_or_none(path, shown)
    if st is not None:
        check_regular(st, shown)
        check_fresh(ctx, path, shown, st)
    try:
        data = content.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        raise ToolError("content contains characters that cannot be encoded as UTF-8") from None
    old: bytes | None = b""  # None: an existing file too large to diff
    if st is not None and st.st_size <= MAX_DIFF_BYTES:
        try:
            old = read_bytes(ctx, path)
        except OSError as exc:
            raise os_error("read", shown, exc) from None
    elif st is not None:
        old = None
    return st, old, data


def _write_sync(ctx: ToolContext, path: Path, shown: str, content: str) -> ToolResult:
    """Do the blocking part of write_file."""
    st, old, data = _plan_write(ctx, path, shown, content)
    try:
        if st is None:
            path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(ctx, path, data, st)
    except (FileExistsError, NotADirectoryError):
        raise ToolError(f"cannot write {shown}: a parent of it is a file, not a directory") from None
    except OSError as exc:
        raise os_error("write", shown, exc) from None
    ctx.remember(path)
    diff, added, removed = ("", 0, 0) if old is None else unified_diff(old, data, shown, st is None)
    lines = count_lines(content)
    size = f"{len(data)} bytes, {lines} line{'s' if lines != 1 else ''}"
    if st is None:
        msg = f"Created {shown} ({size})."
        summary = f"write {shown} (created, {lines} lines)"
    else:
        same = " The content is identical to what was there." if old == data else ""
        msg = f"Overwritten {shown} ({size}; was {st.st_size} bytes).{same}"
        changes = f"{lines} lines" if old is None else f"+{added} -{removed}"
        summary = f"write {shown} (overwritten, {changes})"
    return ToolResult(content=msg, summary=summary, display={"diff": diff, "path": shown})


async def _write_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """write_file: create or replace a whole file, atomically and byte-exact."""
    raw_path: str = args["path"]
    content: str = args["content"]
    if not raw_path.strip():
        raise ToolError("path is empty; give the path of the file to write")
    path = ctx.resolve(raw_path)
    shown = shown_path(ctx, path)
    return await asyncio.to_thread(_write_sync, ctx, path, shown, content)


# --------------------------------------------------------------------------------------------------
# edit_file


def _to_crlf(s: str) -> str:
    """Turn every line ending in `s` into CRLF."""
    return s.replace("\r\n", "\n").replace("\n", "\r\n")


def _line_of(text: str, pos: int) -> int:
    """1-based line number of character offset `pos`."""
    return text.count("\n", 0, pos) + 1


def _positions(text: str, needle: str) -> Iterator[int]:
    """Start offsets of the non-overlapping occurrences of `needle` (as `str.count` counts them)."""
    pos = text.find(needle)
    while pos >= 0:
        yield pos
        pos = text.find(needle, pos + len(needle))


def _no_match_hint(text: str, old: str) -> str:
    """Why old_string probably did not match, if we can tell cheaply."""
    if LINE_NUMBER_PREFIX.match(old):
        return (
            " old_string seems to start with a line-number prefix copied from read_file output "
            "(spaces, a number and a tab); leave the prefixes out"
        )
    lf_text, lf_old = text.replace("\r\n", "\n"), old.replace("\r\n", "\n")
    pos = lf_text.find(lf_old)
    if pos >= 0:
        return (
            f" It matches at line {_line_of(lf_text, pos)} if line endings are ignored (the file mixes "
            "CRLF and LF); include less text around the line endings or rewrite the file with write_file"
        )
    tokens = old.split()
    if tokens:
        pattern = r"\s+".join(re.escape(t) for t in tokens)
        m = re.search(pattern, text)
        if m:
            return (
                f" A match that differs only in whitespace exists at line {_line_of(text, m.start())}; "
                "read those lines again and copy them exactly (indentation, tabs vs spaces, trailing spaces)"
            )
    return " Read the file again to get its current exact text"


@dataclass
class _EditPlan:
    """What edit_file would write: `before` and `after` bytes, and where the replacements start."""

    st: os.stat_result | None
    before: bytes
    after: bytes
    create: bool = False
    """True for an empty old_string on a missing or empty file (written by `_create_via_edit`)."""
    result: str = ""
    new: str = ""
    new_starts: list[int] = field(default_factory=list)


def _plan_edit(ctx: ToolContext, path: Path, shown: str, old: str, new: str, replace_all: bool) -> _EditPlan:
    """Compute edit_file's result without writing (CRLF handling and staleness included); ToolError
    for what would make the edit fail."""
    st = stat_or_none(path, shown)
    if st is not None:
        check_regular(st, shown)
    check_fresh(ctx, path, shown, st)
    if st is None:
        if old:
            raise _not_found_for_edit(ctx, path, shown)
        return _EditPlan(None, b"", _encode_new(new), create=True)
    if st.st_size > MAX_EDIT_BYTES:
        raise ToolError(
            f"{shown} is too large for edit_file ({st.st_size} bytes, limit {MAX_EDIT_BYTES}); "
            "change it with bash (e.g. sed) instead"
        )
    try:
        data = read_bytes(ctx, path)
    except FileNotFoundError:
        raise ToolError(f"{shown} was deleted while editing it") from None
    except OSError as exc:
        raise os_error("read", shown, exc) from None
    if b"\x00" in data:
        raise ToolError(f"{shown} is a binary file ({len(data)} bytes); edit_file only edits text files")
    text = data.decode("utf-8", errors="surrogateescape")
    if not old:
        if text:
            raise ToolError(
                f"old_string is empty, which only works to create a new file or fill an empty one, and "
                f"{shown} is not empty; give the exact text to replace, or use write_file to replace it all"
            )
        return _EditPlan(st, data, _encode_new(new), create=True)
    candidates = [(old, new)]
    crlf_file = text.count("\r\n") * 2 > text.count("\n")
    if crlf_file and _to_crlf(old) != old:
        candidates.insert(0, (_to_crlf(old), _to_crlf(new)))
    elif crlf_file:
        candidates[0] = (old, _to_crlf(new))
    elif "\r\n" in old:
        candidates.append((old.replace("\r\n", "\n"), new.replace("\r\n", "\n")))
    count = 0
    for cand_old, cand_new in candidates:
        count = text.count(cand_old)
        if count:
            old, new = cand_old, cand_new
            break
    if count == 0:
        raise ToolError(f"old_string was not found in {shown}.{_no_match_hint(text, old)}")
    if count > 1 and not replace_all:
        first = zip(range(10), _positions(text, old), strict=False)
        lines = ", ".join(str(_line_of(text, p)) for _, p in first)
        where = f"first 10 at lines {lines}" if count > 10 else f"at lines {lines}"
        raise ToolError(
            f"old_string matches {count} times in {shown} ({where}); it must match exactly once. Add more "
            "surrounding lines to old_string to make it unique, or set replace_all=true to change every one"
        )
    parts: list[str] = []
    new_starts: list[int] = []
    prev = 0
    out_len = 0
    for pos in _positions(text, old):
        parts.append(text[prev:pos])
        out_len += pos - prev
        new_starts.append(out_len)
        parts.append(new)
        out_len += len(new)
        prev = pos + len(old)
        if not replace_all:
            break
    parts.append(text[prev:])
    result = "".join(parts)
    return _EditPlan(st, data, _encode_new(result), result=result, new=new, new_starts=new_starts)


def _encode_new(text: str) -> bytes:
    try:
        return text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        raise ToolError("new_string contains characters that cannot be encoded as UTF-8") from None


def _edit_sync(ctx: ToolContext, path: Path, shown: str, old: str, new: str, replace_all: bool) -> ToolResult:
    """Do the blocking part of edit_file."""
    plan = _plan_edit(ctx, path, shown, old, new, replace_all)
    if plan.create:
        return _create_via_edit(ctx, path, shown, new, original=plan.st)
    st, data, out, result, new, new_starts = plan.st, plan.before, plan.after, plan.result, plan.new, plan.new_starts
    try:
        if not path.exists():
            raise ToolError(f"{shown} was deleted while editing it")
        write_bytes(ctx, path, out, st)
    except OSError as exc:
        raise os_error("write", shown, exc) from None
    ctx.remember(path)
    diff, added, removed = unified_diff(data, out, shown, created=False)
    line_nos = []
    line, last = 1, 0
    for p in new_starts:
        line += result.count("\n", last, p)
        last = p
        line_nos.append(line)
    n = len(new_starts)
    listed = ", ".join(map(str, line_nos[:20])) + (", …" if n > 20 else "")
    at = f"at line {listed}" if n == 1 else f"at lines {listed}"
    msg = f"Edited {shown}: replaced {n} occurrence{'s' if n != 1 else ''} {at}."
    if n == 1:
        msg += "\n" + _snippet(result, new_starts[0], len(new), line_nos[0])
    return ToolResult(
        content=msg,
        summary=f"edit {shown} (+{added} -{removed})" if diff else f"edit {shown} ({n} replaced)",
        display={"diff": diff, "path": shown},
    )


def _snippet(result: str, start: int, length: int, first_line: int) -> str:
    """The edited region with 3 lines of context, numbered like read_file, for the model to check."""
    lo = start
    for _ in range(4):  # back to the start of the line 3 lines above the edit
        lo = result.rfind("\n", 0, lo)
        if lo < 0:
            break
    lo = lo + 1
    first = first_line - result.count("\n", lo, start)
    hi = start + length
    for _ in range(4):  # forward past the end of the line 3 lines below the edit
        nl = result.find("\n", hi)
        if nl < 0:
            hi = len(result)
            break
        hi = nl + 1
    if result.count("\n", lo, hi) > 40:
        return "(the edited region is long; read the file to review it)"
    region = result[lo:hi].removesuffix("\n").encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    lines = [ln.removesuffix("\r") for ln in region.split("\n")]
    return "The edited region now reads:\n" + numbered_lines(lines, first)


def _not_found_for_edit(ctx: ToolContext, path: Path, shown: str) -> ToolError:
    """Missing-file error for edit_file, pointing at the way to create files."""
    err = not_found(ctx, path, shown)
    return ToolError(f"{err} To create a new file, use write_file (or edit_file with an empty old_string)")


def _create_via_edit(
    ctx: ToolContext, path: Path, shown: str, new: str, original: os.stat_result | None = None
) -> ToolResult:
    """edit_file with an empty old_string: write `new` to a missing or empty file."""
    try:
        data = new.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        raise ToolError("new_string contains characters that cannot be encoded as UTF-8") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(ctx, path, data, original)
    except (FileExistsError, NotADirectoryError):
        raise ToolError(f"cannot create {shown}: a parent of it is a file, not a directory") from None
    except OSError as exc:
        raise os_error("write", shown, exc) from None
    ctx.remember(path)
    diff, added, _ = unified_diff(b"", data, shown, created=original is None)
    lines = count_lines(new)
    verb = "Created" if original is None else "Filled empty file"
    return ToolResult(
        content=f"{verb} {shown} ({len(data)} bytes, {lines} line{'s' if lines != 1 else ''}).",
        summary=f"edit {shown} (+{added} -0)",
        display={"diff": diff, "path": shown},
    )


async def _edit_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """edit_file: replace an exact string in a file, keeping every other byte as it was."""
    raw_path: str = args["path"]
    old: str = args["old_string"]
    new: str = args["new_string"]
    replace_all: bool = args.get("replace_all", False)
    if not raw_path.strip():
        raise ToolError("path is empty; give the path of the file to edit")
    if old == new:
        raise ToolError("old_string and new_string are identical; nothing would change")
    path = ctx.resolve(raw_path)
    shown = shown_path(ctx, path)
    return await asyncio.to_thread(_edit_sync, ctx, path, shown, old, new, replace_all)


# --------------------------------------------------------------------------------------------------
# previews: the exact diff a call would apply (for approvals), computed by the same code as the write


def _preview_target(args: dict[str, Any], ctx: ToolContext) -> tuple[Path, str]:
    raw = args.get("path")
    if not isinstance(raw, str) or not raw.strip():
        raise ToolError("path is empty")
    path = ctx.resolve(raw)
    return path, shown_path(ctx, path)


def preview_write(args: dict[str, Any], ctx: ToolContext) -> str:
    """The unified diff write_file would apply ("" when nothing would change); ToolError if it would fail."""
    path, shown = _preview_target(args, ctx)
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolError("content must be a string")
    st, old, data = _plan_write(ctx, path, shown, content)
    if old is None:
        return f"(replaces {shown}, a file too large to diff, with {len(data)} bytes)\n"
    return unified_diff(old, data, shown, st is None)[0]


def preview_edit(args: dict[str, Any], ctx: ToolContext) -> str:
    """The unified diff edit_file would apply (CRLF kept, staleness checked); ToolError if it would fail."""
    path, shown = _preview_target(args, ctx)
    old, new = args.get("old_string"), args.get("new_string")
    if not isinstance(old, str) or not isinstance(new, str):
        raise ToolError("old_string and new_string must be strings")
    if old == new:
        raise ToolError("old_string and new_string are identical; nothing would change")
    plan = _plan_edit(ctx, path, shown, old, new, bool(args.get("replace_all", False)))
    return unified_diff(plan.before, plan.after, shown, created=plan.create and plan.st is None)[0]


# --------------------------------------------------------------------------------------------------
# tool definitions

WRITE_FILE = Tool(
    name="write_file",
    description=load_prompt("tools/write_file.md"),
    parameters={
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "File to create or overwrite, relative to the workspace root or absolute.",
            },
            "content": {
                "type": "string",
                "description": "The complete new content of the file, written exactly as given.",
            },
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    fn=_write_file,
    kind="edit",
    preview=preview_write,
)

EDIT_FILE = Tool(
    name="edit_file",
    description=load_prompt("tools/edit_file.md"),
    parameters={
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "Path of the file to edit, relative to the workspace root or absolute.",
            },
            "old_string": {
                "type": "string",
                "description": "The exact text to replace (without read_file's line-number prefixes).",
            },
            "new_string": {
                "type": "string",
                "description": "The text to put in its place.",
            },
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of requiring exactly one. Default false.",
            },
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    },
    fn=_edit_file,
    kind="edit",
    preview=preview_edit,
)
