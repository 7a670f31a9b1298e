"""File tools: read_file, write_file and edit_file.

Reading streams the file in bounded blocks so a 1 GB log or a 10 MB single-line file never has to
fit in memory. Writing and editing are byte-exact (no newline translation, non-UTF-8 bytes survive an
edit via surrogateescape) and atomic (temp file in the same directory, then `os.replace`, keeping the
original mode bits). Edits refuse to touch a file that changed on disk since the agent last read it.
"""

from __future__ import annotations

import asyncio
import codecs
import difflib
import os
import re
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from kimicode.prompts import load_prompt
from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult

__all__ = ["EDIT_FILE", "READ_FILE", "WRITE_FILE"]

DEFAULT_LIMIT = 2000
"""Lines shown by read_file when the model gives no `limit`."""
MAX_LINE_CHARS = 2000
"""Characters kept of one line; the rest is replaced by a truncation marker."""
MAX_OUTPUT_CHARS = 100_000
"""Rough cap on the text read_file returns."""
SNIFF_BYTES = 8192
"""How much of the start of a file is inspected to decide whether it is binary."""
COUNT_REST_LIMIT = 16 * 1024 * 1024
"""After stopping early, the remaining lines are counted only if at most this many bytes remain."""
MAX_EDIT_BYTES = 32 * 1024 * 1024
"""edit_file loads the whole file; larger files must be changed another way."""
MAX_DIFF_BYTES = 4 * 1024 * 1024
"""Files larger than this get no diff in `display` (computing it would cost too much)."""
MAX_DIFF_CHARS = 200_000
"""The display diff is cut after this many characters."""

_SCAN_BLOCK = 1024 * 1024
_LINE_BLOCK = 64 * 1024
_KEEP_BYTES = MAX_LINE_CHARS * 4 + 4  # enough bytes for MAX_LINE_CHARS characters of any UTF-8 text
_IMAGE_KINDS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".gif": "GIF", ".webp": "WebP"}
# Deleting every byte that is not a UTF-8 continuation byte (0x80-0xBF) leaves the continuation bytes,
# so `len(seg) - len(seg.translate(None, _NON_CONTINUATION))` counts the characters in `seg` quickly.
_NON_CONTINUATION = bytes(b for b in range(256) if not 0x80 <= b < 0xC0)
_LINE_NUMBER_PREFIX = re.compile(r"^ *\d+\t", re.MULTILINE)
_HUNK_HEADER = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


# --------------------------------------------------------------------------------------------------
# shared helpers


def _shown(ctx: ToolContext, path: Path) -> str:
    """The path as the model and the user should see it: relative inside the workspace, else absolute."""
    if ctx.is_inside(path):
        rel = os.path.relpath(path, os.path.realpath(ctx.workspace))
        return Path(rel).as_posix()
    return str(path)


def _os_error(action: str, shown: str, exc: OSError) -> ToolError:
    """A ToolError for an OSError, without a traceback and without Python's exception repr."""
    reason = exc.strerror or exc.__class__.__name__
    return ToolError(f"cannot {action} {shown}: {reason}")


def _similar_names(path: Path) -> list[str]:
    """Up to 3 names in the parent directory that look like `path.name` (cheap: first 5000 entries)."""
    names: list[str] = []
    try:
        with os.scandir(path.parent) as it:
            for i, entry in enumerate(it):
                if i >= 5000:
                    break
                names.append(entry.name)
    except OSError:
        return []
    return difflib.get_close_matches(path.name, names, n=3, cutoff=0.6)


def _not_found(ctx: ToolContext, path: Path, shown: str) -> ToolError:
    """The missing-file error, with similar names from the same directory when there are any."""
    msg = f"file not found: {shown}"
    if not path.parent.is_dir():
        msg += f" (the directory {_shown(ctx, path.parent)} does not exist either)"
    else:
        similar = _similar_names(path)
        if similar:
            parent = _shown(ctx, path.parent)
            prefix = "" if parent == "." else parent.rstrip("/") + "/"
            msg += ". Did you mean: " + ", ".join(prefix + n for n in similar) + "?"
    return ToolError(msg)


def _count_lines(text: str) -> int:
    """Number of lines as an editor counts them (a final line without newline still counts)."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _check_regular(st: os.stat_result, shown: str) -> None:
    """Refuse directories and special files (FIFOs, devices) that would hang or make no sense."""
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{shown} is a directory, not a file; use glob to list its contents")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{shown} is not a regular file (it is a device, socket or pipe)")


def _check_fresh(ctx: ToolContext, path: Path, shown: str, st: os.stat_result | None) -> None:
    """Refuse to change a file the agent has read if it changed on disk (or vanished) since then."""
    stamp = ctx.file_stamps.get(path)
    if stamp is None:
        return
    if st is None:
        raise ToolError(
            f"{shown} was deleted since you last read it; check what happened (e.g. git status) before recreating it"
        )
    if (st.st_mtime_ns, st.st_size) != (stamp.mtime_ns, stamp.size):
        raise ToolError(
            f"{shown} has changed on disk since you last read it (modified outside this tool); "
            "read it again with read_file before changing it, so you do not overwrite those changes"
        )


def _stat_or_none(path: Path, shown: str) -> os.stat_result | None:
    """`os.stat` that returns None for a missing file and a ToolError for other failures."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise _os_error("access", shown, exc) from None


def _atomic_write(path: Path, data: bytes, original: os.stat_result | None) -> None:
    """Write `data` to `path` via a temp file in the same directory and `os.replace`.

    `original` is the stat of the file being replaced: its mode bits (and, when we may, its owner) are
    kept. None means a new file, created with 0o666 minus the umask like any other new file. When the
    directory does not let us create the temp file but the file itself is writable, the file is
    rewritten in place instead (not atomic, but it works).
    """
    # The directory is opened component by component with O_NOFOLLOW and everything below happens
    # relative to it: a symbolic link swapped in after the path was resolved and approved is refused
    # (PathChanged, an OSError), never followed out of the place that was approved.
    from kimicode.permissions.pathresolve import open_dir_nofollow

    dfd = open_dir_nofollow(path.parent)
    try:
        _atomic_write_at(dfd, path, data, original)
    finally:
        os.close(dfd)


def _atomic_write_at(dfd: int, path: Path, data: bytes, original: os.stat_result | None) -> None:
    """`_atomic_write` inside the directory open as `dfd` (names relative to it)."""
    stem = path.name[:200]
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    while True:
        tmp = f".{stem}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | nofollow, 0o666, dir_fd=dfd)
        except FileExistsError:
            continue
        except PermissionError:
            if original is None or not os.access(path.name, os.W_OK, dir_fd=dfd):
                raise
            with os.fdopen(os.open(path.name, os.O_WRONLY | os.O_CLOEXEC | nofollow, dir_fd=dfd), "wb") as f:
                f.write(data)
                f.truncate()
            return
        break
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            if original is not None:
                os.fchmod(f.fileno(), stat.S_IMODE(original.st_mode))
                mine = os.fstat(f.fileno())
                if (mine.st_uid, mine.st_gid) != (original.st_uid, original.st_gid):
                    try:
                        os.fchown(f.fileno(), original.st_uid, original.st_gid)
                    except OSError:
                        pass  # only root may give files away; keeping the mode is what matters
        os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise


def _display_text(data: bytes) -> list[str]:
    """Lines of `data` for a diff shown to a user: undecodable bytes become U+FFFD."""
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def _unified_diff(old: bytes, new: bytes, shown: str, created: bool) -> tuple[str, int, int]:
    """A unified diff of two versions of a file and its (added, removed) line counts.

    Only the region between the common leading and trailing lines is handed to difflib (plus
    context), so a one-line edit of a 50,000-line file costs little.
    """
    if len(old) > MAX_DIFF_BYTES or len(new) > MAX_DIFF_BYTES:
        return "", 0, 0
    a, b = _display_text(old), _display_text(new)
    prefix = 0
    while prefix < len(a) and prefix < len(b) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < len(a) - prefix and suffix < len(b) - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    start = max(0, prefix - 3)
    keep_tail = max(0, suffix - 3)
    a_mid, b_mid = a[start : len(a) - keep_tail], b[start : len(b) - keep_tail]
    fromfile = "/dev/null" if created else f"a/{shown}"
    out: list[str] = []
    added = removed = 0
    for i, line in enumerate(difflib.unified_diff(a_mid, b_mid, fromfile, f"b/{shown}", n=3)):
        if i >= 2:
            m = _HUNK_HEADER.match(line)
            if m:
                line = (
                    f"@@ -{int(m.group(1)) + start}{m.group(2) or ''} "
                    f"+{int(m.group(3)) + start}{m.group(4) or ''} @@{line[m.end() :]}"
                )
            elif line.startswith("+"):
                added += 1
            elif line.startswith("-"):
                removed += 1
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    diff = "".join(out)
    if len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + "\n… [diff truncated]\n"
    return diff, added, removed


def _numbered(lines: list[str], first: int) -> str:
    """cat -n style lines, each capped at MAX_LINE_CHARS characters."""
    out = []
    for i, line in enumerate(lines, start=first):
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f"… [line truncated, {len(line)} chars]"
        out.append(f"{i:>6}\t{line}")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------
# read_file


@dataclass
class _Line:
    """One line as streamed from disk: its head (bounded), its length, and where the next line starts."""

    head: bytes
    """The first `_KEEP_BYTES` bytes of the line (without the newline)."""
    overflow_chars: int
    """Characters after the head (counted, not kept)."""
    crlf: bool
    """The line ended in `\\r` (which is not part of `head` when the line fits)."""
    end: int
    """File offset just after this line's newline (or the end of the file)."""
    terminated: bool
    """The line ended with a newline (False only for the last line of a file without one)."""


def _iter_lines(f: BinaryIO, pos: int) -> Iterator[_Line]:
    """Stream lines from offset `pos`, keeping at most `_KEEP_BYTES` of each in memory."""
    f.seek(pos)
    head = bytearray()
    overflow = 0
    length = 0
    last = -1
    while True:
        block = f.read(_LINE_BLOCK)
        if not block:
            break
        i, n = 0, len(block)
        while i < n:
            j = block.find(b"\n", i)
            end = n if j < 0 else j
            if end > i:
                room = _KEEP_BYTES - len(head)
                if room > 0:
                    head += block[i : min(end, i + room)]
                if end - i > room:
                    seg = block[i + max(room, 0) : end]
                    overflow += len(seg) - len(seg.translate(None, _NON_CONTINUATION))
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
        block = f.read(_SCAN_BLOCK)
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
        block = f.read(_SCAN_BLOCK)
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


def _read_sync(path: Path, shown: str, offset: int, limit: int) -> tuple[str, str]:
    """Do the blocking part of read_file; return (content, summary)."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; the fstat below then refuses it
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
        f = os.fdopen(fd, "rb")
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(f"file not found: {shown}") from None
    except IsADirectoryError:
        raise ToolError(f"{shown} is a directory, not a file; use glob to list its contents") from None
    except OSError as exc:
        raise _os_error("read", shown, exc) from None
    with f:
        try:
            st = os.fstat(f.fileno())
            _check_regular(st, shown)
            size = st.st_size
            if size == 0:
                return f"{shown} is empty (0 bytes).", f"read {shown} (empty)"
            _sniff_binary(f.read(SNIFF_BYTES), size <= SNIFF_BYTES, shown, size)
            return _read_window(f, shown, size, offset, limit)
        except OSError as exc:
            raise _os_error("read", shown, exc) from None


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
    shown = _shown(ctx, path)
    kind = _IMAGE_KINDS.get(path.suffix.lower())
    if kind is not None and path.is_file():
        size = path.stat().st_size
        raise ToolError(
            f"{shown} is an image file ({kind}, {size} bytes); read_file cannot show images yet "
            "(no vision support). Use bash (e.g. `file`) for its dimensions and type"
        )
    if not path.exists():
        raise _not_found(ctx, path, shown)
    content, summary = await asyncio.to_thread(_read_sync, path, shown, offset, limit)
    ctx.remember(path)
    return ToolResult(content=content, summary=summary)


# --------------------------------------------------------------------------------------------------
# write_file


def _plan_write(
    ctx: ToolContext, path: Path, shown: str, content: str
) -> tuple[os.stat_result | None, bytes | None, bytes]:
    """What write_file would do, without doing it: (the file's stat or None, its bytes or None when too
    large to diff, the new bytes). Raises ToolError for what would make the write fail."""
    st = _stat_or_none(path, shown)
    if st is not None:
        _check_regular(st, shown)
        _check_fresh(ctx, path, shown, st)
    try:
        data = content.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        raise ToolError("content contains characters that cannot be encoded as UTF-8") from None
    old: bytes | None = b""  # None: an existing file too large to diff
    if st is not None and st.st_size <= MAX_DIFF_BYTES:
        try:
            old = path.read_bytes()
        except OSError as exc:
            raise _os_error("read", shown, exc) from None
    elif st is not None:
        old = None
    return st, old, data


def _write_sync(ctx: ToolContext, path: Path, shown: str, content: str) -> ToolResult:
    """Do the blocking part of write_file."""
    st, old, data = _plan_write(ctx, path, shown, content)
    try:
        if st is None:
            path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, data, st)
    except (FileExistsError, NotADirectoryError):
        raise ToolError(f"cannot write {shown}: a parent of it is a file, not a directory") from None
    except OSError as exc:
        raise _os_error("write", shown, exc) from None
    ctx.remember(path)
    diff, added, removed = ("", 0, 0) if old is None else _unified_diff(old, data, shown, st is None)
    lines = _count_lines(content)
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
    shown = _shown(ctx, path)
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
    if _LINE_NUMBER_PREFIX.match(old):
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
    st = _stat_or_none(path, shown)
    if st is not None:
        _check_regular(st, shown)
    _check_fresh(ctx, path, shown, st)
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
        data = path.read_bytes()
    except FileNotFoundError:
        raise ToolError(f"{shown} was deleted while editing it") from None
    except OSError as exc:
        raise _os_error("read", shown, exc) from None
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
        _atomic_write(path, out, st)
    except OSError as exc:
        raise _os_error("write", shown, exc) from None
    ctx.remember(path)
    diff, added, removed = _unified_diff(data, out, shown, created=False)
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
    return "The edited region now reads:\n" + _numbered(lines, first)


def _not_found_for_edit(ctx: ToolContext, path: Path, shown: str) -> ToolError:
    """Missing-file error for edit_file, pointing at the way to create files."""
    err = _not_found(ctx, path, shown)
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
        _atomic_write(path, data, original)
    except (FileExistsError, NotADirectoryError):
        raise ToolError(f"cannot create {shown}: a parent of it is a file, not a directory") from None
    except OSError as exc:
        raise _os_error("write", shown, exc) from None
    ctx.remember(path)
    diff, added, _ = _unified_diff(b"", data, shown, created=original is None)
    lines = _count_lines(new)
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
    shown = _shown(ctx, path)
    return await asyncio.to_thread(_edit_sync, ctx, path, shown, old, new, replace_all)


# --------------------------------------------------------------------------------------------------
# previews: the exact diff a call would apply (for approvals), computed by the same code as the write


def _preview_target(args: dict[str, Any], ctx: ToolContext) -> tuple[Path, str]:
    raw = args.get("path")
    if not isinstance(raw, str) or not raw.strip():
        raise ToolError("path is empty")
    path = ctx.resolve(raw)
    return path, _shown(ctx, path)


def preview_write(args: dict[str, Any], ctx: ToolContext) -> str:
    """The unified diff write_file would apply ("" when nothing would change); ToolError if it would fail."""
    path, shown = _preview_target(args, ctx)
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolError("content must be a string")
    st, old, data = _plan_write(ctx, path, shown, content)
    if old is None:
        return f"(replaces {shown}, a file too large to diff, with {len(data)} bytes)\n"
    return _unified_diff(old, data, shown, st is None)[0]


def preview_edit(args: dict[str, Any], ctx: ToolContext) -> str:
    """The unified diff edit_file would apply (CRLF kept, staleness checked); ToolError if it would fail."""
    path, shown = _preview_target(args, ctx)
    old, new = args.get("old_string"), args.get("new_string")
    if not isinstance(old, str) or not isinstance(new, str):
        raise ToolError("old_string and new_string must be strings")
    if old == new:
        raise ToolError("old_string and new_string are identical; nothing would change")
    plan = _plan_edit(ctx, path, shown, old, new, bool(args.get("replace_all", False)))
    return _unified_diff(plan.before, plan.after, shown, created=plan.create and plan.st is None)[0]


# --------------------------------------------------------------------------------------------------
# tool definitions

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
