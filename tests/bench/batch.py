"""Batch throughput, kimicode's overhead per task and peak memory, beside the ideal:

    python tests/bench/batch.py [--tasks 200] [--delay 0.05] [--concurrency 1,8,32,64] [--engines local,ray]

Each task makes 5 tool steps (write_file once, read_file four times) and then answers: 6 model requests,
each delayed `--delay` seconds by the fake server (run in its own process so that its CPU is not counted
as kimicode's). The ideal wall time is tasks x (6 x delay) / concurrency: the model's time only.
Overhead per task = (wall - ideal) x concurrency / tasks (what each slot spent on kimicode, not the model),
and CPU per task = the driver process's CPU seconds / tasks. Peak memory is the driver's maximum RSS
over its RSS before the batch, divided by the concurrency. Every configuration runs in a fresh process.
Targets (issue 15): local overhead < 50 ms and < 30 MB per concurrent task; throughput >= 80% of ideal at 32.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

STEPS = 5
REQUESTS = STEPS + 1


def serve(port_out: Any, stop: Any, delay: float, total: int) -> None:
    """The fake model, in its own process: tool calls until 5 tool results, then an answer."""
    from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

    def script(req: RecordedRequest) -> Reply:
        done = sum(1 for m in req.body["messages"] if m["role"] == "tool")
        usage = {"prompt_tokens": 2000, "completion_tokens": 20, "total_tokens": 2020}
        if done == 0:
            call = ToolCall("write_file", {"path": "notes.txt", "content": "hello\n" * 20})
        elif done < STEPS:
            call = ToolCall("read_file", {"path": "notes.txt"})
        else:
            return Reply(content="finished", first_delay=delay, usage=usage)
        return Reply(tool_calls=[call], first_delay=delay, usage=usage)

    with FakeServer([script] * total) as server:
        port_out.send(server.base_url)
        stop.wait()


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def one(engine: str, concurrency: int, tasks: int, base_url: str) -> dict[str, Any]:
    """Run one configuration in this (fresh) process and return its figures."""
    import kimicode.batch as batch
    from kimicode.agent.core import Agent  # noqa: F401  (imports are start-up, not per-task overhead)
    from kimicode.llm.client import ChatClient  # noqa: F401

    before = rss_mb()
    cpu0 = time.process_time()
    root = tempfile.mkdtemp(prefix="kimicode-bench-")
    statuses: dict[str, int] = {}

    async def go() -> None:
        async for r in batch.run(
            [{"id": f"t{i}", "prompt": "work"} for i in range(tasks)], engine=engine, concurrency=concurrency,
            root=root, base_url=base_url, api_key="sk-bench", model="kimi-k3", permission_mode="yolo",
        ):
            statuses[r.status] = statuses.get(r.status, 0) + 1

    start = time.monotonic()
    asyncio.run(go())
    wall = time.monotonic() - start
    cpu = time.process_time() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    subprocess.run(["rm", "-rf", root], check=False)
    return {"wall": wall, "cpu": cpu, "peak_mb": peak, "base_mb": before, "statuses": statuses}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--engines", default="local")
    ap.add_argument("--one", nargs=3, metavar=("ENGINE", "CONCURRENCY", "BASE_URL"))
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.tasks, args.one[2])))
        return
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    stop = ctx.Event()
    levels = [int(c) for c in args.concurrency.split(",")]
    engines = args.engines.split(",")
    server = ctx.Process(target=serve, args=(send, stop, args.delay, args.tasks * REQUESTS * len(levels)
                                                 * len(engines) + 100), daemon=True)
    server.start()
    base_url = recv.recv()
    print(f"{args.tasks} tasks x {STEPS} tool steps ({REQUESTS} requests of {args.delay * 1000:.0f} ms each), "
          f"{os.cpu_count()} cores")
    head = (f"{'engine':6} {'conc':>4} {'wall s':>7} {'ideal s':>7} {'tasks/s':>8} {'ideal/s':>8} {'% ideal':>7} "
            f"{'ovh ms/task':>11} {'cpu ms/task':>11} {'MB/conc':>7}  statuses")
    print(head)
    try:
        for engine in engines:
            for c in levels:
                done = subprocess.run(
                    [sys.executable, __file__, "--tasks", str(args.tasks), "--one", engine, str(c), base_url],
                    capture_output=True, text=True, check=False,
                )
                if done.returncode:
                    print(f"{engine:6} {c:>4} failed: {done.stderr.strip()[-400:]}")
                    continue
                f = json.loads(done.stdout.strip().splitlines()[-1])
                ideal = args.tasks * REQUESTS * args.delay / c
                overhead = max(0.0, f["wall"] - ideal) * c / args.tasks * 1000
                per_task_mb = max(0.0, f["peak_mb"] - f["base_mb"]) / c
                print(
                    f"{engine:6} {c:>4} {f['wall']:>7.2f} {ideal:>7.2f} {args.tasks / f['wall']:>8.1f} "
                    f"{args.tasks / ideal:>8.1f} {ideal / f['wall'] * 100:>6.0f}% {overhead:>11.1f} "
                    f"{f['cpu'] / args.tasks * 1000:>11.1f} {per_task_mb:>7.1f}  {f['statuses']}",
                    flush=True,
                )
    finally:
        stop.set()
        server.join(5)


if __name__ == "__main__":
    main()
