"""`kimicode serve` under 50 concurrent sessions, beside the library running the same 50 in one process.

    python tests/bench/serve.py [SESSIONS] [--turns N] [--latency SECONDS]

The fake model server answers every request after `--latency` seconds (default 0.2), streaming the answer in
chunks; each turn is a tool call (write_file, accept-edits) and an answer, so two requests per turn. Both
sides run in child processes of this one (the fake server and the readers stay here, so their CPU is
not counted):
- serve: `kimicode serve` with SESSIONS sessions, each followed by its own SSE reader (a thread here);
  every session gets a message at once, TURNS times;
- library: one process with SESSIONS `Agent`s streaming the same turns with `asyncio.gather`.
Printed, side by side: CPU seconds per turn (user + system of the process doing the work), event latency
p50/p99 (serve: from the hub's `ts` to the client's receipt over HTTP; library: from the `on_event` hook,
called as each event is queued, to the consumer's receipt), wall time, and the server's resident memory per
session (after the turns, minus before the sessions were made). Every turn is checked: status success and
its file written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall


def model(latency: float) -> Any:
    def reply(request: RecordedRequest) -> Reply:
        messages = request.body["messages"]
        if messages[-1]["role"] == "tool":
            return Reply(content="Done. " + "The file is written and checked. " * 8, chunk_size=12, first_delay=latency)
        n = sum(1 for m in messages if m["role"] == "user" and not str(m["content"]).startswith("["))
        return Reply(
            tool_calls=[ToolCall("write_file", {"path": f"turn{n}.txt", "content": "x\n" * 20})], first_delay=latency
        )

    return reply


def env_for(server: FakeServer, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "MOONSHOT_", "OPENAI_", "KIMICODE_"))}
    env.update(KIMI_API_KEY="sk-bench", KIMI_BASE_URL=server.base_url, KIMICODE_HOME=str(home))
    return env


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def proc_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# -- serve ---------------------------------------------------------------------------------------------


def run_serve(server: FakeServer, root: Path, sessions: int, turns: int) -> dict[str, Any]:
    from kimicode.serve.client import ServeClient

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kimicode",
            "serve",
            "--port",
            "0",
            "--sandbox",
            "off",
            "--permission-mode",
            "accept-edits",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env_for(server, root / "home-serve"),
    )
    try:
        assert proc.stdout is not None
        client = ServeClient.start_line(proc.stdout.readline(), timeout=120)
        rss_before = proc_rss(proc.pid)
        workspaces = [root / f"serve-{i}" for i in range(sessions)]
        ids = []
        for ws in workspaces:
            ws.mkdir()
            ids.append(client.create(str(ws)))
        latencies: list[float] = []
        lock = threading.Lock()
        done = {sid: threading.Semaphore(0) for sid in ids}
        statuses: list[str] = []

        def reader(sid: str) -> None:
            with ServeClient(client.url, client.http.headers["Authorization"].split()[1], timeout=120) as c:
                for event in c.events(sid, after=0):
                    lag = time.time() - event["ts"]
                    with lock:
                        latencies.append(lag)
                        if event["type"] == "TurnFinished":
                            statuses.append(event["status"])
                    if event["type"] == "TurnFinished":
                        done[sid].release()

        threads = [threading.Thread(target=reader, args=(sid,), daemon=True) for sid in ids]
        for t in threads:
            t.start()
        time.sleep(0.5)
        cpu0, start = proc_cpu(proc.pid), time.monotonic()
        for _ in range(turns):
            for sid in ids:
                client.send(sid, "write the next file")
            for sid in ids:
                if not done[sid].acquire(timeout=300):
                    raise SystemExit(f"serve: session {sid} did not finish its turn")
        wall, cpu = time.monotonic() - start, proc_cpu(proc.pid) - cpu0
        rss_after = proc_rss(proc.pid)
        check(workspaces, statuses, turns)
        return {
            "cpu_per_turn": cpu / (sessions * turns),
            "p50": percentile(latencies, 0.5),
            "p99": percentile(latencies, 0.99),
            "wall": wall,
            "events": len(latencies),
            "rss_per_session": (rss_after - rss_before) / sessions,
        }
    finally:
        proc.terminate()
        proc.wait(30)


def check(workspaces: list[Path], statuses: list[str], turns: int) -> None:
    bad = [s for s in statuses if s != "success"]
    if bad or len(statuses) != len(workspaces) * turns:
        raise SystemExit(f"turns did not all succeed: {len(statuses)} finished, not successful: {bad[:5]}")
    for ws in workspaces:
        for n in range(1, turns + 1):
            if not (ws / f"turn{n}.txt").exists():
                raise SystemExit(f"{ws}: turn {n} wrote no file")


# -- library (child process) ---------------------------------------------------------------------------


async def library_child(root: Path, sessions: int, turns: int) -> dict[str, Any]:
    from kimicode import Agent

    hooked: dict[int, float] = {}
    latencies: list[float] = []
    statuses: list[str] = []

    def on_event(event: Any) -> None:
        hooked[id(event)] = time.perf_counter()

    workspaces = [root / f"lib-{i}" for i in range(sessions)]
    agents = []
    for ws in workspaces:
        ws.mkdir()
        agents.append(Agent(workspace=ws, permission_mode="accept-edits", sandbox="off", on_event=on_event))

    async def turn(agent: Agent) -> None:
        async for event in agent.stream("write the next file"):
            seen = time.perf_counter()
            at = hooked.pop(id(event), None)
            if at is not None:
                latencies.append(max(0.0, seen - at))
            if type(event).__name__ == "TurnFinished":
                statuses.append(event.status)

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.monotonic()
    for _ in range(turns):
        await asyncio.gather(*(turn(a) for a in agents))
    wall = time.monotonic() - start
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    for a in agents:
        await a.aclose()
    check(workspaces, statuses, turns)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {
        "cpu_per_turn": cpu / (sessions * turns),
        "p50": percentile(latencies, 0.5),
        "p99": percentile(latencies, 0.99),
        "wall": wall,
        "events": len(latencies),
    }


def run_library(server: FakeServer, root: Path, sessions: int, turns: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--library-child", str(root), str(sessions), "--turns", str(turns)],
        capture_output=True,
        text=True,
        env=env_for(server, root / "home-lib"),
        timeout=900,
    )
    if out.returncode != 0:
        raise SystemExit(f"library run failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sessions", nargs="?", type=int, default=50)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--library-child", metavar="DIR")
    args = parser.parse_args()
    if args.library_child:
        print(json.dumps(asyncio.run(library_child(Path(args.library_child), args.sessions, args.turns))))
        return
    print(
        f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min), "
        f"{os.cpu_count()} CPUs; {args.sessions} sessions x {args.turns} turns, model latency {args.latency} s"
    )
    with FakeServer() as server, tempfile.TemporaryDirectory() as tmp:
        server.add(*([model(args.latency)] * (args.sessions * args.turns * 2 * 2 + 10)))
        root = Path(tmp)
        lib = run_library(server, root, args.sessions, args.turns)
        srv = run_serve(server, root, args.sessions, args.turns)
    print(f"{'':28}{'library (in process)':>22}{'kimicode serve (HTTP)':>24}")
    print(f"{'CPU per turn (ms)':28}{lib['cpu_per_turn'] * 1000:>22.1f}{srv['cpu_per_turn'] * 1000:>24.1f}")
    print(f"{'event latency p50 (ms)':28}{lib['p50'] * 1000:>22.2f}{srv['p50'] * 1000:>24.2f}")
    print(f"{'event latency p99 (ms)':28}{lib['p99'] * 1000:>22.2f}{srv['p99'] * 1000:>24.2f}")
    print(f"{'wall time, all turns (s)':28}{lib['wall']:>22.2f}{srv['wall']:>24.2f}")
    print(f"{'events received':28}{lib['events']:>22}{srv['events']:>24}")
    print(f"{'server memory per session':28}{'':>22}{srv['rss_per_session'] / 1024:>21.0f} KiB")
    print(f"ratio serve/library, CPU per turn: {srv['cpu_per_turn'] / max(lib['cpu_per_turn'], 1e-9):.2f}x")


if __name__ == "__main__":
    main()
