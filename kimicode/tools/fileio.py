"""What the file tools share: limits, errors that say what to do, freshness checks, atomic writes, diffs.

Used by read_file and write_file/edit_file (`files.py`, `readfile.py`) and apply_patch (`patch.py`).
"""

from __future__ import annotations

import difflib
import os
import re
import secrets
import stat
from pathlib import Path

from kimicode.tools.base import ToolContext, ToolError

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

SCAN_BLOCK = 1024 * 1024
LINE_BLOCK = 64 * 1024
KEEP_BYTES = MAX_LINE_CHARS * 4 + 4  # enough bytes for MAX_LINE_CHARS characters of any UTF-8 text
IMAGE_KINDS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".gif": "GIF", ".webp": "WebP"}
# Deleting every byte that is not a UTF-8 continuation byte (0x80-0xBF) leaves the continuation bytes,
# so `len(seg) - len(seg.translate(None, NON_CONTINUATION))` counts the characters in `seg` quickly.
NON_CONTINUATION = bytes(b for b in range(256) if not 0x80 <= b < 0xC0)
LINE_NUMBER_PREFIX = re.compile(r"^ *\d+\t", re.MULTILINE)
_HUNK_HEADER = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


# --------------------------------------------------------------------------------------------------
# shared helpers


def shown_path(ctx: ToolContext, path: Path) -> str:
    """The path as the model and the user should see it: relative inside the workspace, else absolute."""
    if ctx.is_inside(path):
        rel = os.path.relpath(path, os.path.realpath(ctx.workspace))
        return Path(rel).as_posix()
    return str(path)


def os_error(action: str, shown: str, exc: OSError) -> ToolError:
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


def not_found(ctx: ToolContext, path: Path, shown: str) -> ToolError:
    """The missing-file error, with similar names from the same directory when there are any."""
    msg = f"file not found: {shown}"
    if not path.parent.is_dir():
        msg += f" (the directory {shown_path(ctx, path.parent)} does not exist either)"
    else:
        similar = _similar_names(path)
        if similar:
            parent = shown_path(ctx, path.parent)
            prefix = "" if parent == "." else parent.rstrip("/") + "/"
            msg += ". Did you mean: " + ", ".join(prefix + n for n in similar) + "?"
    return ToolError(msg)


def count_lines(text: str) -> int:
    """Number of lines as an editor counts them (a final line without newline still counts)."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def check_regular(st: os.stat_result, shown: str) -> None:
    """Refuse directories and special files (FIFOs, devices) that would hang or make no sense."""
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{shown} is a directory, not a file; use glob to list its contents")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{shown} is not a regular file (it is a device, socket or pipe)")


def check_fresh(ctx: ToolContext, path: Path, shown: str, st: os.stat_result | None) -> None:
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


def stat_or_none(path: Path, shown: str) -> os.stat_result | None:
    """`os.stat` that returns None for a missing file and a ToolError for other failures."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise os_error("access", shown, exc) from None


def atomic_write(path: Path, data: bytes, original: os.stat_result | None) -> None:
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
    """`atomic_write` inside the directory open as `dfd` (names relative to it)."""
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


def read_bytes(ctx: ToolContext, path: Path) -> bytes:
    """A file's bytes: through `ctx.files` (an editor's buffer) when set, else from the disk."""
    if ctx.files is not None:
        return ctx.files.read_text(path).encode("utf-8", errors="surrogateescape")
    return path.read_bytes()


def write_bytes(ctx: ToolContext, path: Path, data: bytes, original: os.stat_result | None) -> None:
    """Replace `path` with `data`: through `ctx.files` (an editor) when set and `data` is UTF-8 text, else
    atomically on the disk (`atomic_write`). Bytes that are not UTF-8 cannot travel as an editor's text."""
    if ctx.files is not None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            ctx.files.write_text(path, text)
            return
    atomic_write(path, data, original)


def _display_text(data: bytes) -> list[str]:
    """Lines of `data` for a diff shown to a user: undecodable bytes become U+FFFD."""
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def unified_diff(old: bytes, new: bytes, shown: str, created: bool) -> tuple[str, int, int]:
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


def numbered_lines(lines: list[str], first: int) -> str:
    """cat -n style lines, each capped at MAX_LINE_CHARS characters."""
    out = []
    for i, line in enumerate(lines, start=first):
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f"… [line truncated, {len(line)} chars]"
        out.append(f"{i:>6}\t{line}")
    return "\n".join(out)
