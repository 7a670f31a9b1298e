"""Keep any single tool result from flooding the context: cap it and spill the full text to a file.

A result over the cap (characters, and tokens when a counter is given) keeps its head and its tail;
the middle is replaced by a marker that says how much was cut and where the full output was saved,
so the model can read the rest in pieces with `read_file` (offset/limit are line numbers) or `grep`.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kimicode.config.choices import DEFAULT_SPILL_MAX_BYTES, DEFAULT_TOOL_OUTPUT_CAP_TOKENS
from kimicode.safeio import private_dirs, private_write

DEFAULT_CAP_CHARS = 100_000
"""About 25k tokens of code or logs (≈4 characters per token)."""
DEFAULT_CAP_TOKENS = DEFAULT_TOOL_OUTPUT_CAP_TOKENS  # [context] tool_output_cap_tokens (config/sections.py)

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_HEAD_SHARE = 2 / 3


_limits: dict[Path, int] = {}
in_use: set[Path] = set()
"""Spill files still being written (a running command's output): never deleted to make room."""


def set_spill_limit(spill_dir: Path, max_bytes: int) -> None:
    """Bound the disk use of `spill_dir` (one session's directory) for every spill written into it."""
    _limits[Path(spill_dir)] = max(0, int(max_bytes))


def spill_limit(spill_dir: Path) -> int:
    """The byte bound of `spill_dir` (the default unless `set_spill_limit` said otherwise)."""
    return _limits.get(Path(spill_dir), DEFAULT_SPILL_MAX_BYTES)


@dataclass(frozen=True)
class Spilled:
    """Where a full output went: `path`, or `reason` it was not saved; `dropped` older files deleted."""

    path: Path | None
    reason: str = ""
    dropped: tuple[str, ...] = ()

    def dropped_note(self) -> str:
        """A sentence for the result when older saved outputs were deleted to make room (else empty)."""
        if not self.dropped:
            return ""
        names = ", ".join(self.dropped[:5]) + (f" and {len(self.dropped) - 5} more" if len(self.dropped) > 5 else "")
        return f" (to stay within the session's disk limit, older saved outputs were deleted: {names})"


def _escape_or_pass(exc: UnicodeError) -> tuple[bytes, int]:
    """Encode error handler: surrogate-escaped bytes back to the bytes, other lone surrogates as-is."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = bytearray()
    for ch in exc.object[exc.start : exc.end]:
        cp = ord(ch)
        out += bytes([cp - 0xDC00]) if 0xDC80 <= cp <= 0xDCFF else ch.encode("utf-8", "surrogatepass")
    return bytes(out), exc.end


codecs.register_error("kimicode-spill", _escape_or_pass)


def encode_text(text: str) -> bytes:
    """`text` as UTF-8; undecodable bytes kept as they were (surrogateescape), lone surrogates passed."""
    return text.encode("utf-8", "kimicode-spill")


def spill_path(spill_dir: Path, label: str, text: str | bytes) -> Path:
    """The file a full output is saved to: `<label>-<hash>.txt`, the same for the same text."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    digest = hashlib.sha1(data).hexdigest()[:10]
    return spill_dir / f"{_SAFE.sub('_', label)[:60]}-{digest}.txt"


def make_room(spill_dir: Path, needed: int, keep: Path | None = None) -> tuple[str, ...]:
    """Delete the oldest files of `spill_dir` until `needed` more bytes fit in its limit; their names."""
    limit = spill_limit(spill_dir)
    try:
        files = [(p.stat(), p) for p in spill_dir.iterdir() if p.is_file() and p != keep and p not in in_use]
    except OSError:
        return ()
    files.sort(key=lambda item: (item[0].st_mtime_ns, item[1].name))
    used = sum(st.st_size for st, _ in files)
    dropped: list[str] = []
    for st, path in files:
        if used + needed <= limit:
            break
        with contextlib.suppress(OSError):
            path.unlink()
            used -= st.st_size
            dropped.append(path.name)
    return tuple(dropped)


def save_spill(text: str | bytes, spill_dir: Path | None, label: str) -> Spilled:
    """Save a full output under `spill_dir` within its disk limit (oldest saved outputs dropped first)."""
    if spill_dir is None:
        return Spilled(None, "no session directory to save it in")
    data = text if isinstance(text, bytes) else encode_text(text)
    limit = spill_limit(spill_dir)
    if len(data) > limit:
        return Spilled(
            None, f"it is larger ({len(data):,} bytes) than the session's limit for saved outputs ({limit:,} bytes)"
        )
    try:
        private_dirs(spill_dir)
        path = spill_path(spill_dir, label, data)
        if path.exists():
            path.touch()  # the same output again: keep it, now the newest
            return Spilled(path)
        dropped = make_room(spill_dir, len(data))
        private_write(path, data)
        return Spilled(path, dropped=dropped)
    except OSError as exc:
        return Spilled(None, f"it could not be saved ({exc.strerror or exc})")


_FULL_OUTPUT = re.compile(r"the full output \([^)]*\) is saved at (\S+?\.txt)")


def full_output(text: str, spill_dir: Path | None) -> Path | None:
    """The file holding the complete output that `text` (an already shortened output) names, if it exists in
    `spill_dir`: a second cut must point there, not at a copy of the shortened text."""
    if spill_dir is None or "is saved at" not in text:
        return None
    for match in _FULL_OUTPUT.finditer(text):
        path = Path(match.group(1))
        if path.parent == spill_dir and path.is_file():
            return path
    return None


def spill(text: str, spill_dir: Path | None, label: str) -> Path | str:
    """Save `text` under `spill_dir`; return the path, or a reason why it could not be saved. An output that was
    shortened before and names its complete copy returns that copy (never a partial one)."""
    whole = full_output(text, spill_dir)
    if whole is not None:
        return whole
    saved = save_spill(text, spill_dir, label)
    return saved.path if saved.path is not None else saved.reason


def _cut(text: str, keep: int) -> tuple[int, int]:
    """(end of head, start of tail) keeping about `keep` characters, on line breaks when close by."""
    head_end = int(keep * _HEAD_SHARE)
    tail_start = len(text) - (keep - head_end)
    nl = text.rfind("\n", int(head_end * 0.8), head_end)
    if nl != -1:
        head_end = nl + 1
    nl = text.find("\n", tail_start, tail_start + max(1, (keep - head_end) // 5))
    if nl != -1:
        tail_start = nl + 1
    return head_end, max(head_end, tail_start)


def cap_output(
    text: str,
    limit: int,
    spill_dir: Path | None,
    label: str,
    *,
    max_tokens: int | None = None,
    count: Callable[[str], int] | None = None,
) -> str:
    """Return `text`, or its head and tail with a marker saying what was cut and where the full text is.

    `limit` caps characters; with `max_tokens` and `count` the kept part also fits in `max_tokens`.
    The full output is written to `spill_dir/<label>-<hash>.txt`.
    """
    token_cap = max_tokens is not None and count is not None
    if len(text) <= limit and (not token_cap or len(text) <= (max_tokens or 0)):
        return text
    keep = min(limit, len(text))
    tokens_kept: int | None = None
    if token_cap and count is not None and max_tokens is not None:
        if len(text) <= limit and count(text) <= max_tokens:
            return text
        for _ in range(8):
            head_end, tail_start = _cut(text, keep)
            tokens_kept = count(text[:head_end]) + count(text[tail_start:])
            if tokens_kept <= max_tokens or keep <= 64:
                break
            keep = max(64, int(keep * max_tokens / tokens_kept * 0.97))
    head_end, tail_start = _cut(text, keep)
    cut = text[head_end:tail_start]
    cut_lines = cut.count("\n")
    first_cut_line = text.count("\n", 0, head_end) + 1
    whole = full_output(text, spill_dir)  # shortened before (a long command's output): the complete copy exists
    saved = Spilled(whole) if whole is not None else save_spill(text, spill_dir, label)
    total_lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    approx = ""
    if tokens_kept is not None and keep > 0:
        approx = f" (~{round(len(cut) * tokens_kept / max(1, head_end + len(text) - tail_start)):,} tokens)"
    if whole is not None:
        size = whole.stat().st_size if whole.exists() else 0
        detail = (
            f"; the full output ({size:,} bytes) is saved at {whole}: use read_file with offset/limit or grep on it"
        )
    elif saved.path is not None:
        detail = (
            f"; the full output ({len(text):,} characters, {total_lines:,} lines) is saved at {saved.path}: "
            f"use read_file with offset/limit (the elided part starts at line {first_cut_line:,}) or grep on it"
            f"{saved.dropped_note()}"
        )
    else:
        detail = f"; the full output is not available: {saved.reason}"
    marker = f"\n\n… [{len(cut):,} characters / {cut_lines:,} lines{approx} elided from the middle{detail}] …\n\n"
    return text[:head_end] + marker + text[tail_start:]
