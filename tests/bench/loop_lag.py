"""How long kimicode blocks the event loop during an agent's first request, side by side with the 50 ms
target: a 10 ms ticker runs beside `await agent.run(...)` in a fresh interpreter (so `openai` is not
imported yet) against the fake server, and its worst delay is printed.

    python tests/bench/loop_lag.py [--runs N]

Run it with PYTHONPATH pointing at another checkout (e.g. `git archive` of the base commit) to get the
baseline figure for the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

from kimicode.testing import FakeServer, Reply

CHILD = """
import asyncio, json, sys, time
from kimicode import Agent

async def main(url, ws):
    agent = Agent(api_key="k", base_url=url, workspace=ws, persist=False)
    lags, stop = [], False

    async def ticker():
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            lags.append(now - last - 0.01)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.03)
    started = time.perf_counter()
    await agent.run("hi")
    took = time.perf_counter() - started
    stop = True
    await task
    await agent.aclose()
    print(json.dumps({"lag_ms": max(lags) * 1000, "first_request_ms": took * 1000}))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    lags, firsts = [], []
    with FakeServer() as server, tempfile.TemporaryDirectory() as ws:
        for _ in range(args.runs):
            server.add(Reply(content="hello"))
            env = {**os.environ, "KIMICODE_HOME": os.path.join(ws, "home")}
            out = subprocess.run(
                [sys.executable, "-c", textwrap.dedent(CHILD), server.base_url, ws],
                capture_output=True, text=True, env=env, check=True,
            )  # fmt: skip
            report = json.loads(out.stdout)
            lags.append(report["lag_ms"])
            firsts.append(report["first_request_ms"])
    print(
        f"first request, {args.runs} fresh interpreters: max ticker lag (ms) median {statistics.median(lags):.1f}, "
        f"worst {max(lags):.1f} | target 50 | first request took {statistics.median(firsts):.0f} ms (median)"
    )


if __name__ == "__main__":
    main()
