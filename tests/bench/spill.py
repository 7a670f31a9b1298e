"""What saving a long bash output costs, side by side with not saving it (the old behaviour):

    python tests/bench/spill.py [--mb 3 30 200]

For each size, `head -c SIZE` of a repeated line runs through `run_shell` (the bash tool's engine)
with no session directory (head + tail only, the middle lost) and with one (every byte also written
to a file there). Prints wall time (best of 3) and the bytes on disk; the output returned to the model
is the same ~40 kB in both cases.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from kimicode.tools.shell import run_shell


def once(mb: int, spill_dir: Path | None) -> tuple[float, int]:
    command = f"yes 'a line of build output, 40 bytes long' | head -c {mb * 1_000_000}"
    start = time.perf_counter()
    outcome = asyncio.run(run_shell(command, cwd="/tmp", env=dict(os.environ), timeout=120, spill_dir=spill_dir))
    elapsed = time.perf_counter() - start
    assert outcome.total_bytes == mb * 1_000_000
    on_disk = sum(p.stat().st_size for p in spill_dir.iterdir()) if spill_dir else 0
    return elapsed, on_disk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, nargs="+", default=[3, 30, 200])
    args = parser.parse_args()
    print(f"{'output':>8} | {'no spill (s)':>12} | {'spill (s)':>9} | {'overhead':>8} | {'saved on disk':>13}")
    print("-" * 64)
    for mb in args.mb:
        base = min(once(mb, None)[0] for _ in range(3))
        runs = []
        for _ in range(3):
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(once(mb, Path(tmp) / "session"))
        spilled, disk = min(runs)
        print(f"{mb:>6}MB | {base:>12.3f} | {spilled:>9.3f} | {spilled / base:>7.2f}x | {disk:>13,}")


if __name__ == "__main__":
    main()
