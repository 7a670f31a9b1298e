"""Checkpoint cost on 1k- and 10k-file trees (10k files ≈ 200 MB), beside baselines.

Prints, for both trees side by side: the first checkpoint into a fresh store (everything stored), a
later one after a few files changed (the kept private index means git re-hashes only those), a
restore of those files, and the baselines `cp -r` of the tree and `git add -A && git commit` into a
fresh repository. The terminal starts storing the workspace when a session opens (the warm-up); the
rows below it give what the turn's first checkpoint then waits for when the first change comes 0.5 s
or 3 s after the session opened. Each figure is the median of 3 runs, each after `os.sync()` so that the disk
writeback of the step before (the baselines write hundreds of MB) is not charged to the next.
Targets (issue 14): first < 3 s, later < 200 ms at 10k files.

    python tests/bench/checkpoints_store.py [--small]   # --small: 1k files only
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kimicode.checkpoints import CheckpointStore
from kimicode.checkpoints.session import SessionCheckpoints

WORDS = (
    "def",
    "return",
    "self",
    "value",
    "import",
    "class",
    "for",
    "in",
    "if",
    "else",
    "None",
    "result",
    "items",
    "append",
    "config",
    "path",
    "name",
    "=",
    "(",
    ")",
    ":",
    "+",
    "data",
    "index",
    "error",
)


def make_tree(root: Path, files: int, total_bytes: int) -> None:
    """Source-like files (lines of random identifiers and numbers: compresses about as code does)."""
    rng = random.Random(files)
    size = total_bytes // files
    for i in range(files):
        d = root / f"pkg{i // 200}" / f"mod{(i // 20) % 10}"
        d.mkdir(parents=True, exist_ok=True)
        lines: list[str] = []
        length = 0
        while length < size:
            line = "    " + " ".join(rng.choice(WORDS) for _ in range(8)) + f"  # {rng.getrandbits(32):x}\n"
            lines.append(line)
            length += len(line)
        (d / f"file{i}.py").write_text("".join(lines)[:size])
    (root / ".gitignore").write_text("*.log\n")


def timed(fn: Callable[[], object], runs: int = 1, setup: Callable[[], object] | None = None) -> float:
    """Median wall time of `runs` calls, each after `setup` and an `os.sync()` (so the disk writeback
    of the previous step is not charged to this one)."""
    times = []
    for _ in range(runs):
        if setup is not None:
            setup()
        os.sync()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def touch_some(root: Path, n: int, round_: int) -> list[str]:
    files = sorted(root.rglob("file*.py"))[:: max(1, 997)][:n]
    for f in files:
        f.write_text(f"changed in round {round_}\n")
    return [str(f.relative_to(root)) for f in files]


def bench(files: int, total: int, runs: int) -> dict[str, float]:
    base = Path(tempfile.mkdtemp(prefix="kc-bench-"))
    try:
        ws = base / "ws"
        ws.mkdir()
        make_tree(ws, files, total)
        rows: dict[str, float] = {}
        rows["baseline: cp -r"] = timed(
            lambda: subprocess.run(["cp", "-r", str(ws), str(base / "copy")], check=True),
            runs,
            lambda: shutil.rmtree(base / "copy", ignore_errors=True),
        )
        env = {
            **os.environ,
            "GIT_DIR": str(base / "fresh.git"),
            "GIT_WORK_TREE": str(ws),
            "GIT_INDEX_FILE": str(base / "fresh-index"),
            "GIT_AUTHOR_NAME": "b",
            "GIT_AUTHOR_EMAIL": "b@x",
            "GIT_COMMITTER_NAME": "b",
            "GIT_COMMITTER_EMAIL": "b@x",
        }

        def fresh_repo() -> None:
            shutil.rmtree(base / "fresh.git", ignore_errors=True)
            (base / "fresh-index").unlink(missing_ok=True)
            plain = {k: v for k, v in env.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
            subprocess.run(["git", "init", "-q", "--bare", str(base / "fresh.git")], check=True, env=plain)
            subprocess.run(["git", "config", "core.bare", "false"], check=True, env=env)
            subprocess.run(["git", "config", "gc.auto", "0"], check=True, env=env)  # no gc racing the next run

        def git_commit() -> None:
            subprocess.run(["git", "add", "-A"], check=True, env=env, cwd=ws)
            subprocess.run(["git", "commit", "-qm", "b"], check=True, env=env, cwd=ws)

        rows["baseline: git add -A + commit (fresh repo)"] = timed(git_commit, runs, fresh_repo)
        shutil.rmtree(base / "fresh.git", ignore_errors=True)
        shutil.rmtree(base / "copy", ignore_errors=True)
        homes = itertools.count()
        stores: list[CheckpointStore] = []

        def new_store() -> None:
            if stores:
                shutil.rmtree(stores[-1].dir.parent.parent, ignore_errors=True)
            stores.append(CheckpointStore(base / f"home{next(homes)}", ws))

        def warm_then_first(head_start: float) -> Callable[[], object]:
            def run() -> None:
                cps = SessionCheckpoints(stores[-1], "b", None)
                thread = cps.warm()
                time.sleep(head_start)  # the user typing, the model thinking
                start = time.perf_counter()
                cps.begin_turn("bench", 1)
                cps.before_change()
                waits.append(time.perf_counter() - start)
                if thread is not None:
                    thread.join()

            return run

        waits: list[float] = []
        rows["warm-up at session open (in the background)"] = timed(lambda: stores[-1].prepare(), runs, new_store)
        for head_start in (0.5, 3.0):
            waits.clear()
            timed(warm_then_first(head_start), runs, new_store)
            rows[f"  turn waits, first change {head_start:.1f} s after open"] = statistics.median(waits)
        first: list[str] = []
        rows["first checkpoint (fresh store)"] = timed(
            lambda: first.append(stores[-1].snapshot("first", "b/1").id), runs, new_store
        )
        store = stores[-1]
        rows["later checkpoint, nothing changed"] = timed(lambda: store.snapshot("same"), runs)
        round_ = iter(range(runs))
        rows["later checkpoint, 5 files changed"] = timed(
            lambda: store.snapshot("later"), runs, lambda: touch_some(ws, 5, next(round_))
        )
        changed = touch_some(ws, 5, 99)
        rows["restore 5 files (incl. its own checkpoint)"] = timed(lambda: store.restore(first[-1], changed, "restore"))
        rows["store size on disk (MB, not seconds)"] = store.size() / 1e6
        order = ["first checkpoint (fresh store)"] + [k for k in rows if k != "first checkpoint (fresh store)"]
        return {k: rows[k] for k in sorted(rows, key=lambda k: (not k.startswith("baseline"), order.index(k)))}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    sizes = [(1_000, 20_000_000)] + ([] if "--small" in sys.argv else [(10_000, 200_000_000)])
    runs = 3
    print(f"median of {runs} runs each; load average before: {os.getloadavg()[0]:.2f}", flush=True)
    results = [bench(files, total, runs) for files, total in sizes]
    head = "".join(f"{f'{files} files, {total / 1e6:.0f} MB':>22}" for files, total in sizes)
    print(f"\n{'':<46}{head}")
    for name in results[0]:
        unit = "   " if "MB" in name else " s "
        print(f"{name:<46}" + "".join(f"{r[name]:>19.3f}{unit}" for r in results))
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
