"""What the issue-10 hardening costs, side by side with doing nothing, in one run:

    python tests/bench/hardening.py

1. Masking a tool result (`Masker.mask`) of 1 KB, 40 KB and 1 MB with the ~10 secrets a typical
   environment holds, versus returning the text as it is (the baseline).
2. Masking command output as it is read (`ByteStreamMasker`, 64 KB reads) versus feeding the reads
   straight to the buffer.
3. `sanitize` (terminal safety) of plain text and of text full of escape sequences, versus no-op.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from kimicode.config.redact import Masker
from kimicode.termsafe import sanitize

SECRETS = [f"sk-{i:02d}-" + "x" * 40 for i in range(10)]


def timed(fn: Callable[[], object], repeat: int = 20) -> float:
    """Best of `repeat` runs, in milliseconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def main() -> None:
    masker = Masker(SECRETS)
    line = "drwxr-xr-x  5 user user  4096 Dec  1 10:00 some/ordinary/path/file.py: all good\n"
    print(f"{'case':44} {'baseline ms':>12} {'hardened ms':>12}")
    for label, size in (
        ("mask a 1 KB result", 1_000),
        ("mask a 40 KB result", 40_000),
        ("mask a 1 MB result", 1_000_000),
    ):
        text = (line * (size // len(line) + 1))[:size]
        print(f"{label:44} {timed(lambda t=text: t):12.3f} {timed(lambda t=text: masker.mask(t)):12.3f}")
    data = (line * 20_000).encode()
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]

    def streamed() -> None:
        sm = masker.byte_stream()
        for c in chunks:
            sm.feed(c)
        sm.flush()

    print(
        f"{'stream-mask 1.6 MB of output in 64 KB reads':44} {timed(lambda: list(chunks)):12.3f} "
        f"{timed(streamed):12.3f}"
    )
    plain = line * 500
    hostile = "\x1b[31mred\x1b[0m \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \u202e\r\n" * 500
    print(f"{'sanitize 40 KB of plain output':44} {timed(lambda: plain):12.3f} {timed(lambda: sanitize(plain)):12.3f}")
    print(
        f"{'sanitize 40 KB full of escape sequences':44} {timed(lambda: hostile):12.3f} "
        f"{timed(lambda: sanitize(hostile)):12.3f}"
    )


if __name__ == "__main__":
    main()
