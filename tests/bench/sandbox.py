"""What `--sandbox auto` costs per bash command, side by side with running it unconfined:

    python tests/bench/sandbox.py

Each row runs a command 20 times through the bash tool's `run_shell`, once plain (the baseline) and
once wrapped in the workspace-write bubblewrap sandbox, and prints the median milliseconds.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from kimicode.tools.sandbox import Sandbox, probe
from kimicode.tools.shell import run_shell

COMMANDS = ["true", "echo hi", "ls -la /usr/bin | wc -l", "git --version"]


async def median_ms(command: str, cwd: str, wrap: Sandbox | None, runs: int = 20) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        await run_shell(command, cwd=cwd, env=dict(os.environ), timeout=30, wrap=wrap.wrap if wrap else None)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def main() -> None:
    status = probe()
    if not status.available or status.bwrap is None:
        print(f"sandbox unavailable here: {status.reason}")
        return
    with tempfile.TemporaryDirectory() as ws:
        sandbox = Sandbox(Path(ws), status.bwrap, auto=True)
        print(f"{'command':28} {'plain ms':>9} {'sandboxed ms':>13} {'extra ms':>9}")
        for command in COMMANDS:
            plain = await median_ms(command, ws, None)
            boxed = await median_ms(command, ws, sandbox)
            print(f"{command:28} {plain:9.1f} {boxed:13.1f} {boxed - plain:9.1f}")


if __name__ == "__main__":
    asyncio.run(main())
