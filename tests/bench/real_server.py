"""kimicode against a real llama.cpp `llama-server` per window size: the figures of issue 21.

    python tests/bench/real_server.py [--turns N] [--windows 2048,4096,8192]

For each window, a ten-turn session (each turn its own `kimicode -p` process: `-c`, `--resume`, `--fork`), each
turn reading a file through a tool call (see tests/real_server/), twice:

- as llama.cpp serves it (kimicode reads `/props` and lets the server count each process's first request);
- as a server that says nothing but its window (a relay hides `/props`, `/apply-template`, `/tokenize`, as vLLM
  or a gateway would): the first request of the first process is estimated blind, every later one starts from
  the calibration kept by the earlier processes.

Printed per window: turns completed, compactions, prompt tokens the server evaluated per turn (its own
`timings.prompt_n`: the rest came from its KV cache), and the mean error of kimicode's estimate against the
server's `prompt_tokens`, before calibration (blind) and after it (across processes).
Baseline (the previous round, from the issue): an 8k session compacted every turn, a 4,096 window refused every
request before sending it, the estimate was 5,091 against 561 (808% off) in every new process.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from real_server.llama import LlamaServer, unavailable
from real_server.sessions import Figures, run_session


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def row(figures: Figures, blind: Figures) -> str:
    later = figures.evaluated[1:] or [0]
    return (
        f"{figures.window:>6,} | {figures.completed:>2}/{figures.turns:<2} | {figures.compactions:>3} | "
        f"{figures.evaluated[0]:>6,} {statistics.median(later):>6,.0f} {max(later):>6,} | "
        f"{statistics.median(figures.prompts):>6,.0f} | {pct(figures.error_rate(('probe', 'server'))):>7} | "
        f"{pct(blind.error_rate(('none',))):>8} {pct(blind.error_rate(('restored', 'server'))):>7} | "
        f"{blind.completed:>2}/{blind.turns:<2} {blind.compactions:>3}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--windows", default="2048,4096,8192")
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        print(f"skipped: {reason}")
        return
    print(
        "window | turns | cmp | evaluated/turn: first median max | prompt | est err | blind  learnt | "
        "blind run: turns cmp"
    )
    for window in (int(w) for w in args.windows.split(",")):
        server = LlamaServer(window).start()
        try:
            start = time.monotonic()
            with tempfile.TemporaryDirectory() as tmp:
                ws = Path(tmp) / "ws"
                ws.mkdir()
                counted = run_session(server, ws, Path(tmp) / "home", turns=args.turns)
            with tempfile.TemporaryDirectory() as tmp:
                ws = Path(tmp) / "ws"
                ws.mkdir()
                blind = run_session(
                    server,
                    ws,
                    Path(tmp) / "home",
                    turns=max(3, args.turns // 2),
                    hide_counting=True,
                    extra=("--context-window", str(window)),
                )
            print(row(counted, blind), f"  ({time.monotonic() - start:.0f} s)", flush=True)
            print(f"         evaluated per turn: {counted.evaluated}; prompts: {counted.prompts}", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
