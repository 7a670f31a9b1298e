"""Keep any single tool result from flooding the context: cap it and spill the full text to a file.

A result over the cap (characters, and tokens when a counter is given) keeps its head and its tail;
the middle is replaced by a marker that says how much was cut and where the full output was saved,
so the model can read the rest in pieces with `read_file` (offset/limit are line numbers) or `grep`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

DEFAULT_CAP_CHARS = 100_000
"""About 25k tokens of code or logs (≈4 characters per token)."""
DEFAULT_CAP_TOKENS = 25_000

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_HEAD_SHARE = 2 / 3


def spill_path(spill_dir: Path, label: str, text: str) -> Path:
    """The file a full output is saved to: `<label>-<hash>.txt`, the same for the same text."""
    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return spill_dir / f"{_SAFE.sub('_', label)[:60]}-{digest}.txt"


def spill(text: str, spill_dir: Path | None, label: str) -> Path | str:
    """Save `text` under `spill_dir`; return the path, or a reason why it could not be saved."""
    if spill_dir is None:
        return "no session directory to save it in"
    try:
        spill_dir.mkdir(parents=True, exist_ok=True)
        path = spill_path(spill_dir, label, text)
        if not path.exists():
            path.write_text(text, encoding="utf-8", errors="surrogateescape")
        return path
    except OSError as exc:
        return f"it could not be saved ({exc.strerror or exc})"


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
    where = spill(text, spill_dir, label)
    total_lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    approx = ""
    if tokens_kept is not None and keep > 0:
        approx = f" (~{round(len(cut) * tokens_kept / max(1, head_end + len(text) - tail_start)):,} tokens)"
    if isinstance(where, Path):
        detail = (
            f"; the full output ({len(text):,} characters, {total_lines:,} lines) is saved at {where}: "
            f"use read_file with offset/limit (the elided part starts at line {first_cut_line:,}) or grep on it"
        )
    else:
        detail = f"; the full output is not available: {where}"
    marker = f"\n\n… [{len(cut):,} characters / {cut_lines:,} lines{approx} elided from the middle{detail}] …\n\n"
    return text[:head_end] + marker + text[tail_start:]
