"""apply_patch: the patch envelope OpenAI models are trained on, applied atomically and byte-exact.

    *** Begin Patch
    *** Add File: path          (every following line starts with +)
    *** Update File: path
    *** Move to: new/path       (optional, right after Update File)
    @@ optional context line    (a line to find first; several @@ lines narrow the search)
     context line
    -removed line
    +added line
    *** End of File             (optional: the hunk must match at the end of the file)
    *** Delete File: path
    *** End Patch

Every change is computed and checked in memory before anything is written; if a write then fails, the
files already changed are restored, so a patch applies to all its files or to none. Like edit_file, the
bytes outside the changed lines are kept: CRLF line endings, bytes that are not UTF-8, and the presence
or absence of a final newline.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kimicode.prompts import load_prompt
from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult
from kimicode.tools.fileio import (
    MAX_EDIT_BYTES,
    atomic_write,
    check_fresh,
    check_regular,
    not_found,
    os_error,
    read_bytes,
    shown_path,
    stat_or_none,
    unified_diff,
    write_bytes,
)

__all__ = ["APPLY_PATCH", "PatchError", "apply_patch_text", "parse_patch", "patch_paths"]

BEGIN, END = "*** Begin Patch", "*** End Patch"
ADD, UPDATE, DELETE, MOVE = "*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "
EOF_MARK = "*** End of File"


class PatchError(ToolError):
    """The patch text is malformed or does not apply; the message says where and why."""


@dataclass
class Hunk:
    """One `@@` section: context lines to find first, then ( kind, text ) lines with kind ' ', '-' or '+'."""

    contexts: list[str] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)
    at_eof: bool = False
    line: int = 0
    """Line of the patch where the hunk starts (for error messages)."""


@dataclass
class FileOp:
    """One file section of a patch."""

    kind: Literal["add", "update", "delete"]
    path: str
    move_to: str | None = None
    add_lines: list[str] = field(default_factory=list)
    hunks: list[Hunk] = field(default_factory=list)
    line: int = 0


# -- parsing ----------------------------------------------------------------------------------------


def _strip_envelope(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines or lines[0].strip() != BEGIN:
        raise PatchError(f"the patch must start with a line `{BEGIN}`")
    if lines[-1].strip() != END:
        raise PatchError(f"the patch must end with a line `{END}`")
    return lines


def parse_patch(text: str) -> list[FileOp]:
    """Parse the envelope into file operations; raise PatchError naming the patch line of any problem.

    Line by line: a file header opens an operation, `*** Move to:` renames the one being updated, and the
    other lines belong to the open operation as its kind reads them (`_BODY`)."""
    ops: list[FileOp] = []
    op: FileOp | None = None
    hunk: Hunk | None = None
    for n, raw in enumerate(_strip_envelope(text)[1:-1], start=2):  # n: the line of the patch
        header = _file_header(raw, n)
        if header is not None:
            op, hunk = header, None
            ops.append(op)
        elif op is None:
            if raw.strip():
                raise PatchError(
                    f"patch line {n}: expected `{ADD}`, `{UPDATE}` or `{DELETE}` followed by a path, got {raw[:80]!r}"
                )
        elif raw.startswith(MOVE):
            _move_to(op, raw, n)
        else:
            hunk = _BODY[op.kind](op, hunk, raw, n)
    _check_ops(ops)
    return ops


def _file_header(raw: str, n: int) -> FileOp | None:
    """The operation a `*** Add File:`, `*** Update File:` or `*** Delete File:` line opens, else None."""
    kind: Literal["add", "update", "delete"]
    if raw.startswith(ADD):
        kind = "add"
    elif raw.startswith(UPDATE):
        kind = "update"
    elif raw.startswith(DELETE):
        kind = "delete"
    else:
        return None
    path = raw.split(": ", 1)[1].strip()
    if not path:
        raise PatchError(f"patch line {n}: the file path is missing")
    return FileOp(kind, path, line=n)


def _move_to(op: FileOp, raw: str, n: int) -> None:
    """`*** Move to: path`, only right after `*** Update File:`."""
    if op.kind != "update" or op.hunks or op.move_to is not None:
        raise PatchError(f"patch line {n}: `{MOVE.strip()}` must directly follow `{UPDATE.strip()}`")
    op.move_to = raw[len(MOVE) :].strip()
    if not op.move_to:
        raise PatchError(f"patch line {n}: the destination path is missing")


def _delete_line(op: FileOp, hunk: Hunk | None, raw: str, n: int) -> Hunk | None:
    """A deleted file's section holds nothing but blank lines."""
    if raw.strip():
        raise PatchError(f"patch line {n}: `{DELETE.strip()}` takes no content, got {raw[:80]!r}")
    return hunk


def _add_line(op: FileOp, hunk: Hunk | None, raw: str, n: int) -> Hunk | None:
    """An added file's line: `+` and the text."""
    if not raw.startswith("+"):
        raise PatchError(f"patch line {n}: every line of an added file must start with '+', got {raw[:80]!r}")
    op.add_lines.append(raw[1:])
    return hunk


def _update_line(op: FileOp, hunk: Hunk | None, raw: str, n: int) -> Hunk | None:
    """An updated file's line; returns the hunk now open. `@@ context` opens a hunk (or narrows the search of
    one with no lines yet), `*** End of File` closes one that must match at the file's end, and the rest are
    the open hunk's lines (opening one when none is)."""
    if raw.startswith("@@"):
        if hunk is None or hunk.lines:
            hunk = Hunk(line=n)
            op.hunks.append(hunk)
        if context := raw[2:].strip():
            hunk.contexts.append(context)
        return hunk
    if raw.strip() == EOF_MARK:
        if hunk is None or not hunk.lines:
            raise PatchError(f"patch line {n}: `{EOF_MARK}` must end a hunk")
        hunk.at_eof = True
        return None
    if hunk is None:
        hunk = Hunk(line=n)
        op.hunks.append(hunk)
    if not raw:
        hunk.lines.append((" ", ""))  # an empty context line whose leading space was lost
    elif raw[0] in " -+":
        hunk.lines.append((raw[0], raw[1:]))
    else:
        raise PatchError(
            f"patch line {n}: a hunk line must start with ' ' (context), '-' (remove) or '+' (add), got {raw[:80]!r}"
        )
    return hunk


_BODY = {"add": _add_line, "update": _update_line, "delete": _delete_line}
"""How each kind of operation reads the lines of its section."""


def _check_ops(ops: Sequence[FileOp]) -> None:
    """A patch changes something: at least one operation, every update with a change, no hunk of context only."""
    if not ops:
        raise PatchError("the patch contains no file operations")
    for op in ops:
        if op.kind == "update" and not op.move_to and not any(h.lines for h in op.hunks):
            raise PatchError(f"patch line {op.line}: `{UPDATE}{op.path}` has no changes")
        for h in op.hunks:
            if h.lines and all(k == " " for k, _ in h.lines):
                raise PatchError(f"patch line {h.line}: the hunk has only context lines, no '-' or '+' lines")


def patch_paths(text: str) -> list[str]:
    """Every path a patch would create, change, delete or move to (empty when it does not parse).

    The permission layer checks each of them (for example that all lie inside the workspace).
    """
    try:
        ops = parse_patch(text)
    except PatchError:
        return []
    out: list[str] = []
    for op in ops:
        out.append(op.path)
        if op.move_to:
            out.append(op.move_to)
    return out


# -- applying ---------------------------------------------------------------------------------------


@dataclass
class _Doc:
    """A text file as lines without their line endings, plus each line's ending."""

    lines: list[str]
    eols: list[str]
    terminated: bool
    eol: str
    """The ending given to new lines: the file's dominant one."""

    @classmethod
    def parse(cls, text: str) -> _Doc:
        parts = text.split("\n")
        terminated = len(parts) > 1 and parts[-1] == ""
        if terminated or parts == [""]:
            parts.pop()
        lines: list[str] = []
        eols: list[str] = []
        for i, part in enumerate(parts):
            last = i == len(parts) - 1 and not terminated
            if not last and part.endswith("\r"):
                lines.append(part[:-1])
                eols.append("\r\n")
            else:
                lines.append(part)
                eols.append("" if last else "\n")
        crlf = eols.count("\r\n")
        return cls(lines, eols, terminated or not parts, "\r\n" if crlf * 2 > len(eols) else "\n")

    def render(self) -> str:
        if not self.lines:
            return ""
        eols = [e or self.eol for e in self.eols]
        if not self.terminated:
            eols[-1] = ""
        return "".join(line + eol for line, eol in zip(self.lines, eols, strict=True))


def _normalizers() -> list[Any]:
    return [lambda s: s, lambda s: s.rstrip(), lambda s: s.strip()]


def _seek(lines: Sequence[str], pattern: Sequence[str], start: int, at_eof: bool) -> int | None:
    """First index >= start where `pattern` matches: exactly, then ignoring trailing, then all edge spaces."""
    if not pattern:
        return start
    last = len(lines) - len(pattern)
    if last < 0:
        return None
    for norm in _normalizers():
        want = [norm(p) for p in pattern]
        candidates = [last] if at_eof else range(start, last + 1)
        for i in candidates:
            if i >= start and all(norm(lines[i + j]) == want[j] for j in range(len(pattern))):
                return i
    return None


def _apply_hunks(doc: _Doc, hunks: list[Hunk], shown: str) -> None:
    """Apply the hunks in order to `doc`; raise PatchError when one does not match."""
    cursor = 0
    edits: list[tuple[int, int, list[tuple[str, str]]]] = []
    for h in hunks:
        for ctx in h.contexts:
            found = _seek(doc.lines, [ctx], cursor, False)
            if found is None:
                raise PatchError(
                    f"{shown}: the context line `@@ {ctx}` (patch line {h.line}) was not found"
                    + _where(doc, [ctx], cursor)
                )
            cursor = found + 1
        old = [text for kind, text in h.lines if kind != "+"]
        lines = list(h.lines)
        if not old:  # pure insertion: after the @@ context, else at the end of the file
            at = cursor if h.contexts and not h.at_eof else len(doc.lines)
            edits.append((at, 0, lines))
            cursor = at
            continue
        found = _seek(doc.lines, old, cursor, h.at_eof)
        if found is None and old[-1] == "":  # a trailing blank context line the file does not have
            while lines and lines[-1] == (" ", ""):
                lines.pop()
            old = [text for kind, text in lines if kind != "+"]
            found = _seek(doc.lines, old, cursor, h.at_eof) if old else None
        if found is None:
            raise PatchError(
                f"{shown}: the hunk at patch line {h.line} does not match the file; these lines were not found "
                f"in order{_where(doc, old, cursor)}:\n"
                + "\n".join(old[:8])
                + ("\n…" if len(old) > 8 else "")
                + "\nRead the file again and copy the context and removed lines exactly."
            )
        edits.append((found, len(old), lines))
        cursor = found + len(old)
    for start, length, hunk_lines in reversed(edits):
        new_lines: list[str] = []
        new_eols: list[str] = []
        pos = start
        for kind, text in hunk_lines:
            if kind == " ":  # keep the file's own line (its exact whitespace and ending)
                new_lines.append(doc.lines[pos])
                new_eols.append(doc.eols[pos])
                pos += 1
            elif kind == "-":
                pos += 1
            else:
                new_lines.append(text)
                new_eols.append(doc.eol)
        doc.lines[start : start + length] = new_lines
        doc.eols[start : start + length] = new_eols


def _where(doc: _Doc, pattern: list[str], cursor: int) -> str:
    """A hint when the lines exist before the cursor (hunks out of order)."""
    if cursor and pattern and _seek(doc.lines, pattern, 0, False) is not None:
        return " after the previous hunk (it exists earlier in the file: hunks must be in file order)"
    return ""


@dataclass
class _Change:
    """A file operation computed in memory, ready to write."""

    kind: Literal["add", "update", "delete"]
    path: Path
    shown: str
    old: bytes | None
    new: bytes | None
    stat: os.stat_result | None
    dest: Path | None = None
    dest_shown: str = ""


def _decode(data: bytes, shown: str) -> str:
    if b"\x00" in data:
        raise PatchError(f"{shown} is a binary file ({len(data)} bytes); apply_patch only edits text files")
    return data.decode("utf-8", errors="surrogateescape")


def _encode(text: str, shown: str) -> bytes:
    try:
        return text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        raise PatchError(f"the new text of {shown} contains characters that cannot be encoded as UTF-8") from None


def _plan(ctx: ToolContext, ops: list[FileOp]) -> list[_Change]:
    """Read every file and compute every result; nothing is written."""
    changes: list[_Change] = []
    touched: dict[Path, str] = {}

    def claim(path: Path, shown: str) -> None:
        if path in touched:
            raise PatchError(f"{shown} appears more than once in the patch; put all its changes in one section")
        touched[path] = shown

    for op in ops:
        path = ctx.resolve(op.path)
        shown = shown_path(ctx, path)
        claim(path, shown)
        st = stat_or_none(path, shown)
        if op.kind == "add":
            if st is not None:
                raise PatchError(f"cannot add {shown}: it already exists (use `{UPDATE}{op.path}` to change it)")
            text = "".join(line + "\n" for line in op.add_lines)
            changes.append(_Change("add", path, shown, None, _encode(text, shown), None))
            continue
        if st is None:
            raise PatchError(str(not_found(ctx, path, shown)))
        check_regular(st, shown)
        check_fresh(ctx, path, shown, st)
        if st.st_size > MAX_EDIT_BYTES:
            raise PatchError(f"{shown} is too large for apply_patch ({st.st_size} bytes, limit {MAX_EDIT_BYTES})")
        try:
            data = read_bytes(ctx, path)
        except OSError as exc:
            raise os_error("read", shown, exc) from None
        if op.kind == "delete":
            changes.append(_Change("delete", path, shown, data, None, st))
            continue
        doc = _Doc.parse(_decode(data, shown))
        _apply_hunks(doc, op.hunks, shown)
        change = _Change("update", path, shown, data, _encode(doc.render(), shown), st)
        if op.move_to:
            dest = ctx.resolve(op.move_to)
            dest_shown = shown_path(ctx, dest)
            if dest != path:
                claim(dest, dest_shown)
                if stat_or_none(dest, dest_shown) is not None:
                    raise PatchError(f"cannot move {shown} to {dest_shown}: the destination already exists")
                change.dest, change.dest_shown = dest, dest_shown
        changes.append(change)
    return changes


def _commit(ctx: ToolContext, changes: list[_Change]) -> None:
    """Write every change; on a failure restore what was already written and raise."""
    undo: list[tuple[Path, bytes | None, os.stat_result | None]] = []  # (path, bytes to restore or None: delete)
    try:
        for ch in changes:
            if ch.kind == "add":
                assert ch.new is not None
                ch.path.parent.mkdir(parents=True, exist_ok=True)
                undo.append((ch.path, None, None))
                write_bytes(ctx, ch.path, ch.new, None)
            elif ch.kind == "delete":
                undo.append((ch.path, ch.old, ch.stat))
                ch.path.unlink()
            else:
                assert ch.new is not None
                if ch.dest is not None:
                    ch.dest.parent.mkdir(parents=True, exist_ok=True)
                    undo.append((ch.dest, None, None))
                    atomic_write(ch.dest, ch.new, ch.stat)
                    undo.append((ch.path, ch.old, ch.stat))
                    ch.path.unlink()
                else:
                    undo.append((ch.path, ch.old, ch.stat))
                    write_bytes(ctx, ch.path, ch.new, ch.stat)
    except (OSError, PatchError) as exc:
        for path, data, st in reversed(undo):
            try:
                if data is None:
                    path.unlink(missing_ok=True)
                else:
                    write_bytes(ctx, path, data, st if path.exists() else None)
                    if st is not None:
                        os.chmod(path, st.st_mode & 0o7777)
            except OSError:
                pass  # best effort: the error below tells the model what failed
        shown = next((c.shown for c in changes if c.path == getattr(exc, "filename", None)), "")
        where = f" ({shown})" if shown else ""
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise PatchError(f"writing the patch failed{where}: {reason}; no file was changed") from None
    for ch in changes:
        if ch.kind == "delete":
            ctx.file_stamps.pop(ch.path, None)
        elif ch.dest is not None:
            ctx.file_stamps.pop(ch.path, None)
            ctx.remember(ch.dest)
        else:
            ctx.remember(ch.path)


def _change_diff(ch: _Change) -> tuple[str, int, int]:
    name = ch.dest_shown or ch.shown
    diff, added, removed = unified_diff(ch.old or b"", ch.new or b"", name, created=ch.kind == "add")
    if ch.kind == "delete":
        diff = diff.replace(f"+++ b/{name}", "+++ /dev/null", 1)
    if ch.dest is not None:
        diff = f"rename {ch.shown} -> {ch.dest_shown}\n" + diff
    return diff, added, removed


def preview_patch(args: dict[str, Any], ctx: ToolContext) -> str:
    """The unified diff of every file the patch would change, computed by the same code that applies it
    (nothing is written); PatchError when the patch would not apply."""
    text = args.get("input")
    if not isinstance(text, str) or not text.strip():
        raise PatchError(f"input is empty; give the whole patch from `{BEGIN}` to `{END}`")
    return "".join(_change_diff(ch)[0] for ch in _plan(ctx, parse_patch(text)))


def apply_patch_text(ctx: ToolContext, text: str) -> ToolResult:
    """Parse, check and apply a patch (blocking); the result lists each file with its change counts."""
    ops = parse_patch(text)
    changes = _plan(ctx, ops)
    _commit(ctx, changes)
    report: list[str] = []
    diffs: list[str] = []
    total_add = total_del = 0
    for ch in changes:
        diff, added, removed = _change_diff(ch)
        total_add += added
        total_del += removed
        diffs.append(diff)
        letter = {"add": "A", "update": "M", "delete": "D"}[ch.kind]
        if ch.dest is not None:
            report.append(f"R {ch.shown} -> {ch.dest_shown} (+{added} -{removed})")
        else:
            report.append(f"{letter} {ch.shown} (+{added} -{removed})")
    n = len(changes)
    return ToolResult(
        content=f"Applied the patch to {n} file{'s' if n != 1 else ''}:\n" + "\n".join(report),
        summary=f"patch {n} file{'s' if n != 1 else ''} (+{total_add} -{total_del})",
        display={
            "diff": "".join(diffs),
            "path": changes[0].dest_shown or changes[0].shown,
            "paths": [c.dest_shown or c.shown for c in changes],
        },
    )


async def _apply_patch(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    text = args.get("input")
    if not isinstance(text, str) or not text.strip():
        raise PatchError(f"input is empty; give the whole patch from `{BEGIN}` to `{END}`")
    return await asyncio.to_thread(apply_patch_text, ctx, text)


APPLY_PATCH = Tool(
    name="apply_patch",
    description=load_prompt("tools/apply_patch.md"),
    parameters={
        "type": "object",
        "properties": {
            "input": {
                "type": "string",
                "description": f"The entire patch, from `{BEGIN}` to `{END}`.",
            },
        },
        "required": ["input"],
        "additionalProperties": False,
    },
    fn=_apply_patch,
    kind="edit",
    preview=preview_patch,
    paths=lambda args: patch_paths(args["input"]) if isinstance(args.get("input"), str) else [],
)
