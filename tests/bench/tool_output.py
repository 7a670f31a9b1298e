"""What live command output costs: a bash call printing a lot, run through the agent with and without
its output reported as ToolOutputDelta events (and shown in the terminal's live tail).

    python tests/bench/tool_output.py [--mb N]

- baseline: the bash tool alone, no reporter (what a tool call cost before live output existed).
- reported: the same call with a reporter that, like the agent, wraps each piece in a ToolOutputDelta.
- reported + view: also fed to a TurnView (the terminal) redrawing its live tail into a StringIO console.

Wall-clock seconds, best of 5 (interleaved), for `head -c N MB /dev/zero | tr '\\0' 'x' | fold -w 100` (N MB of
100-character lines).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from kimicode.events import ToolCallStarted, ToolOutputDelta
from kimicode.tools.base import ToolContext
from kimicode.tools.progress import reporting
from kimicode.tools.shell import bash_tool
from kimicode.ui.view import TurnView


def run(command: str, where: Path, listener: Callable[[str], None] | None) -> float:
    async def go() -> None:
        tool = bash_tool()
        if listener is None:
            await tool.fn({"command": command}, ToolContext(workspace=where))
            return
        with reporting(listener):
            await tool.fn({"command": command}, ToolContext(workspace=where))

    start = time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=50)
    mb = parser.parse_args().mb
    command = f"head -c {mb * 1024 * 1024} /dev/zero | tr '\\0' 'x' | fold -w 100"
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        counts = {"events": 0}

        def reported(text: str) -> None:
            ToolOutputDelta("c1", text)
            counts["events"] += 1

        console = Console(file=io.StringIO(), width=100, height=40, force_terminal=True, color_system="truecolor")
        view = TurnView(console, plain=False, show_reasoning=False, tool_kind=lambda _n: "execute")
        view.start()
        view.handle(ToolCallStarted("c1", "bash", {"command": command}))

        def shown(text: str) -> None:
            view.handle(ToolOutputDelta("c1", text))

        kinds: list[tuple[str, Callable[[str], None] | None]] = [
            ("baseline (no reporter)", None),
            ("reported (ToolOutputDelta)", reported),
            ("reported + terminal view", shown),
        ]
        best = {name: float("inf") for name, _ in kinds}
        for _ in range(5):  # interleaved, so a warming cache or a busy neighbour does not favour one
            for name, listener in kinds:
                best[name] = min(best[name], run(command, where, listener))
        rows = [(name, best[name]) for name, _ in kinds]
    base = rows[0][1]
    print(f"bash printing {mb} MB in 100-character lines ({counts['events'] // 5} output events per run)")
    print(f"{'':28} {'seconds':>8} {'vs baseline':>12}")
    for name, seconds in rows:
        print(f"{name:28} {seconds:8.3f} {seconds / base:11.2f}x")


if __name__ == "__main__":
    main()
