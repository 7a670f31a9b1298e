"""Keep any single tool result from flooding the context: cap it and spill the full text to a file."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

DEFAULT_CAP_CHARS = 100_000
"""About 25k tokens of code or logs (≈4 characters per token)."""

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def cap_output(text: str, limit: int, spill_dir: Path | None, label: str) -> str:
    """Return `text`, or its head and tail with a marker saying what was cut and where the full text is.

    The full output is written to `spill_dir/<label>-<hash>.txt` so the model can read it in pieces.
    """
    if len(text) <= limit:
        return text
    head_len = limit * 2 // 3
    tail_len = limit - head_len
    cut = text[head_len : len(text) - tail_len]
    cut_lines = cut.count("\n")
    where = ""
    if spill_dir is not None:
        try:
            spill_dir.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
            path = spill_dir / f"{_SAFE.sub('_', label)[:60]}-{digest}.txt"
            path.write_text(text, encoding="utf-8", errors="surrogateescape")
            where = (
                f"; the full output ({len(text):,} characters) is saved at {path}: "
                "use read_file with offset/limit or grep on it"
            )
        except OSError as exc:
            where = f"; the full output could not be saved ({exc.strerror})"
    marker = f"\n\n… [{len(cut):,} characters / {cut_lines:,} lines elided from the middle{where}] …\n\n"
    return text[:head_len] + marker + text[len(text) - tail_len :]
