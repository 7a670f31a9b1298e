"""Start-up and one-turn latency, side by side: `python -c pass`, `kimicode --version`, `--help`,
and a headless one-turn run against the fake server. Prints medians over N runs.

    python tests/bench/startup.py [N]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kimicode.testing import FakeServer, Reply


def kimicode() -> list[str]:
    script = Path(sys.executable).parent / "kimicode"
    if script.exists():
        return [str(script)]
    found = shutil.which("kimicode")
    return [found] if found else [sys.executable, "-m", "kimicode"]


def median_wall(cmd: list[str], runs: int, env: dict[str, str], before: object = None) -> float:
    times = []
    for _ in range(runs):
        if callable(before):
            before()
        start = time.perf_counter()
        subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    home = tempfile.mkdtemp(prefix="kimicode-bench-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "MOONSHOT_", "OPENAI_"))}
    env["KIMICODE_HOME"] = home
    with FakeServer() as server:
        env_run = dict(env, KIMI_API_KEY="bench", KIMI_BASE_URL=server.base_url)
        rows = [
            ("python -c pass", median_wall([sys.executable, "-c", "pass"], runs, env)),
            ("kimicode --version", median_wall([*kimicode(), "--version"], runs, env)),
            ("kimicode --help", median_wall([*kimicode(), "--help"], runs, env)),
            (
                "kimicode -p (one turn, fake server)",
                median_wall([*kimicode(), "-p", "hi"], runs, env_run,
                            before=lambda: server.add(Reply(reasoning="ok", content="hello"))),
            ),
        ]
    shutil.rmtree(home, ignore_errors=True)
    base = rows[0][1]
    print(f"median wall time over {runs} runs")
    for name, secs in rows:
        print(f"  {name:<38} {secs * 1000:8.1f} ms   {secs / base:5.2f}x python")


if __name__ == "__main__":
    main()
