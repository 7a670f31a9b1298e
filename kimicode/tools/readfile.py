"""read_file: a window of a text file with line numbers, streamed in bounded blocks.

A 1 GB log or a 10 MB single-line file never has to fit in memory: lines are read block by block and
each is cut at `MAX_LINE_CHARS`; binary files are refused, images go to the vision reader.
"""

from __future__ import annotations

import asyncio
import codecs
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from kimicode.prompts import load_prompt
from kimicode.tools.base import FileAccess, Tool, ToolContext, ToolError, ToolResult
from kimicode.tools.fileio import (
    COUNT_REST_LIMIT,
    DEFAULT_LIMIT,
    IMAGE_KINDS,
    KEEP_BYTES,
    LINE_BLOCK,
    MAX_LINE_CHARS,
    MAX_OUTPUT_CHARS,
    NON_CONTINUATION,
    SCAN_BLOCK,
    SNIFF_BYTES,
    check_regular,
    not_found,
    os_error,
    shown_path,
)

# --------------------------------------------------------------------------------------------------
# read_file


@dataclass
class _Line:
    """One line as streamed from disk: its head (bounded), its length, and where the next line starts."""

    head: bytes
    """The first `KEEP_BYTES` bytes of the line (without the newline)."""
    overflow_chars: int
    """Characters after the head (counted, not kept)."""
    crlf: bool
    """The line ended in `\\r` (which is not part of `head` when the line fits)."""
    end: int
    """File offset just after this line's newline (or the end of the file)."""
    terminated: bool
    """The line ended with a newline (False only for the last line of a file without one)."""


def _iter_lines(f: BinaryIO, pos: int) -> Iterator[_Line]:
    """Stream lines from offset `pos`, keeping at most `KEEP_BYTES` of each in memory."""
    f.seek(pos)
    head = bytearray()
    overflow = 0
    length = 0
    last = -1
    while True:
        block = f.read(LINE_BLOCK)
        if not block:
            break
        i, n = 0, len(block)
        while i < n:
            j = block.find(b"\n", i)
            end = n if j < 0 else j
            if end > i:
                room = KEEP_BYTES - len(head)
                if room > 0:
                    head += block[i : min(end, i + room)]
                if end - i > room:
                    seg = block[i + max(room, 0) : end]
                    overflow += len(seg) - len(seg.translate(None, NON_CONTINUATION))
                length += end - i
                last = block[end - 1]
            pos += end - i
            if j < 0:
                break
            pos += 1
            yield _finish_line(head, overflow, length, last, pos, True)
            head, overflow, length, last = bytearray(), 0, 0, -1
            i = j + 1
    if length:
        yield _finish_line(head, overflow, length, last, pos, False)


def _finish_line(head: bytearray, overflow: int, length: int, last: int, end: int, term: bool) -> _Line:
    """Strip a trailing CR (from the head, or from the overflow count) and package the line."""
    crlf = last == 0x0D
    if crlf:
        if length <= len(head):
            del head[-1]
        else:
            overflow -= 1
    return _Line(bytes(head), overflow, crlf, end, term)


def _skip_lines(f: BinaryIO, count: int) -> tuple[int, int]:
    """Skip `count` newline-terminated lines from the start; return (offset reached, lines skipped)."""
    skipped = 0
    base = 0
    f.seek(0)
    while skipped < count:
        block = f.read(SCAN_BLOCK)
        if not block:
            return base, skipped
        n = block.count(b"\n")
        if skipped + n < count:
            skipped += n
            base += len(block)
            continue
        i = -1
        while skipped < count:
            i = block.find(b"\n", i + 1)
            skipped += 1
        return base + i + 1, skipped
    return base, skipped


def _count_rest(f: BinaryIO, pos: int) -> int:
    """Lines from offset `pos` to the end of the file (a final unterminated line counts)."""
    f.seek(pos)
    lines = 0
    last = b""
    while True:
        block = f.read(SCAN_BLOCK)
        if not block:
            break
        lines += block.count(b"\n")
        last = block[-1:]
    if last and last != b"\n":
        lines += 1
    return lines


def _sniff_binary(sample: bytes, whole: bool, shown: str, size: int) -> None:
    """Raise if the first bytes look binary: a NUL byte, or many bytes that are not UTF-8."""
    if sample.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ToolError(
            f"{shown} is a binary file ({size} bytes); it looks like UTF-16 text, which read_file cannot "
            "show. Convert it with bash, e.g. `iconv -f UTF-16 -t UTF-8 FILE | head -200`"
        )
    bad = b"\x00" in sample
    if not bad and sample:
        text = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(sample, final=whole)
        replaced = text.count("\ufffd") - sample.count(b"\xef\xbf\xbd")
        bad = replaced > 0.3 * max(len(text), 1)
    if bad:
        raise ToolError(
            f"{shown} is a binary file ({size} bytes); read_file only shows text. "
            "Use bash to inspect it (e.g. `file`, `xxd FILE | head -50`, `strings FILE | head`)"
        )


def _read_sync(path: Path, shown: str, offset: int, limit: int, files: FileAccess | None = None) -> tuple[str, str]:
    """Do the blocking part of read_file; return (content, summary). With `files` (an editor over ACP) the
    text comes from there (its unsaved buffer) once the file on disk is known to be a regular file."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; the fstat below then refuses it
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
        f = os.fdopen(fd, "rb")
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(f"file not found: {shown}") from None
    except IsADirectoryError:
        raise ToolError(f"{shown} is a directory, not a file; use glob to list its contents") from None
    except OSError as exc:
        raise os_error("read", shown, exc) from None
    with f:
        try:
            st = os.fstat(f.fileno())
            check_regular(st, shown)
            size = st.st_size
            if size:
                _sniff_binary(f.read(SNIFF_BYTES), size <= SNIFF_BYTES, shown, size)
            if files is not None:
                return _read_text(files.read_text(path), shown, offset, limit)
            if size == 0:
                return f"{shown} is empty (0 bytes).", f"read {shown} (empty)"
            return _read_window(f, shown, size, offset, limit)
        except OSError as exc:
            raise os_error("read", shown, exc) from None


def _read_text(text: str, shown: str, offset: int, limit: int) -> tuple[str, str]:
    """`_read_window` over text an editor gave (the same numbering, caps and notes as from the disk)."""
    data = text.encode("utf-8", errors="surrogateescape")
    if not data:
        return f"{shown} is empty (0 bytes).", f"read {shown} (empty)"
    _sniff_binary(data[:SNIFF_BYTES], len(data) <= SNIFF_BYTES, shown, len(data))
    return _read_window(io.BytesIO(data), shown, len(data), offset, limit)


def _read_window(f: BinaryIO, shown: str, size: int, offset: int, limit: int) -> tuple[str, str]:
    """Format lines offset..offset+limit-1 of an open text file, stopping at the output cap."""
    start, skipped = _skip_lines(f, offset - 1)
    if start >= size or skipped < offset - 1:
        f.seek(size - 1)
        total = skipped + (0 if f.read(1) == b"\n" else 1)
        raise ToolError(
            f"offset {offset} is past the end of {shown}, which has {total} line{'s' if total != 1 else ''}"
        )
    out: list[str] = []
    used = 0
    lineno = offset - 1
    crlf = False
    bad_utf8 = False
    capped = False
    next_pos = start
    for line in _iter_lines(f, start):
        if lineno - offset + 1 >= limit:
            break
        text = line.head.decode("utf-8", errors="replace")
        if "\ufffd" in text and text.count("\ufffd") > line.head.count(b"\xef\xbf\xbd"):
            bad_utf8 = True
        chars = len(text) + line.overflow_chars
        if chars > MAX_LINE_CHARS:
            text = text[:MAX_LINE_CHARS] + f"… [line truncated, {chars} chars]"
        entry = f"{lineno + 1:>6}\t{text}"
        if out and used + len(entry) + 1 > MAX_OUTPUT_CHARS:
            capped = True
            break
        out.append(entry)
        used += len(entry) + 1
        lineno += 1
        crlf = crlf or line.crlf
        next_pos = line.end
    shown_count = lineno - offset + 1
    notes: list[str] = []
    remaining = size - next_pos
    if remaining > 0:
        if remaining <= COUNT_REST_LIMIT:
            of = f"{lineno + _count_rest(f, next_pos)}"
        else:
            of = f"{lineno}+ (more lines follow)"
        why = f"output capped at ~{MAX_OUTPUT_CHARS} characters; " if capped else ""
        notes.append(f"[{why}showing lines {offset}-{lineno} of {of}; continue with offset={lineno + 1}]")
    elif offset > 1:
        notes.append(f"[showing lines {offset}-{lineno} of {lineno}; end of file]")
    if crlf:
        notes.append(
            "[this file uses CRLF (\\r\\n) line endings; they are not shown. edit_file keeps them: "
            "write old_string/new_string with plain \\n]"
        )
    if bad_utf8:
        notes.append("[some bytes are not valid UTF-8 and are shown as \ufffd]")
    content = "\n".join(out)
    if notes:
        content += "\n" + "\n".join(notes)
    summary = f"read {shown}:{offset}-{lineno} ({shown_count} line{'s' if shown_count != 1 else ''})"
    return content, summary


async def _read_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """read_file: numbered lines of a text file, streamed so huge files stay cheap."""
    raw_path: str = args["path"]
    offset: int = args.get("offset", 1)
    limit: int = args.get("limit", DEFAULT_LIMIT)
    if not raw_path.strip():
        raise ToolError("path is empty; give the path of a file to read")
    if offset < 1:
        raise ToolError(f"offset must be 1 or more (lines are numbered from 1), got {offset}")
    if limit < 1:
        raise ToolError(f"limit must be 1 or more, got {limit}")
    path = ctx.resolve(raw_path)
    shown = shown_path(ctx, path)
    kind = IMAGE_KINDS.get(path.suffix.lower())
    if kind is not None and path.is_file():
        size = path.stat().st_size
        raise ToolError(
            f"{shown} is an image file ({kind}, {size} bytes); read_file cannot show images yet "
            "(no vision support). Use bash (e.g. `file`) for its dimensions and type"
        )
    if not path.exists():
        raise not_found(ctx, path, shown)
    content, summary = await asyncio.to_thread(_read_sync, path, shown, offset, limit, ctx.files)
    ctx.remember(path)
    return ToolResult(content=content, summary=summary)


READ_FILE = Tool(
    name="read_file",
    description=load_prompt("tools/read_file.md"),
    parameters={
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "Path of the file, relative to the workspace root or absolute.",
            },
            "offset": {
                "type": "integer",
                "minimum": 1,
                "description": "First line to show, 1-based. Default 1.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": f"Maximum number of lines to show. Default {DEFAULT_LIMIT}.",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    fn=_read_file,
    kind="read",
)
