"""Checkpoint cost on 1k- and 10k-file trees (10k files ≈ 200 MB), beside baselines.

Prints, per tree: the first checkpoint of a session (everything hashed), a later one after a few
files changed (the kept private index means git re-hashes only those), a restore of those files,
and the baselines `cp -r` of the tree and `git add -A && git commit` into a fresh repository.
Targets (issue 14): first < 3 s, later < 200 ms at 10k files.

    python tests/bench/checkpoints.py [--small]   # --small: 1k files only
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kimicode.checkpoints import CheckpointStore

WORDS = ("def", "return", "self", "value", "import", "class", "for", "in", "if", "else", "None", "result",
         "items", "append", "config", "path", "name", "=", "(", ")", ":", "+", "data", "index", "error")


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


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def touch_some(root: Path, n: int, round_: int) -> list[str]:
    files = sorted(root.rglob("file*.py"))[:: max(1, 997)][:n]
    for f in files:
        f.write_text(f"changed in round {round_}\n")
    return [str(f.relative_to(root)) for f in files]


def bench(files: int, total: int) -> list[tuple[str, float]]:
    base = Path(tempfile.mkdtemp(prefix="kc-bench-"))
    try:
        ws, home = base / "ws", base / "home"
        ws.mkdir()
        make_tree(ws, files, total)
        subprocess.run(["sync"], check=False)
        rows: list[tuple[str, float]] = []
        rows.append(("baseline: cp -r", timed(lambda: subprocess.run(["cp", "-r", str(ws), str(base / "copy")],
                                                                    check=True))))
        env = {**os.environ, "GIT_DIR": str(base / "fresh.git"), "GIT_WORK_TREE": str(ws),
               "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b",
               "GIT_COMMITTER_EMAIL": "b@x"}

        def fresh_git() -> None:
            plain = {k: v for k, v in env.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
            subprocess.run(["git", "init", "-q", "--bare", str(base / "fresh.git")], check=True, env=plain)
            subprocess.run(["git", "config", "core.bare", "false"], check=True, env=env)
            subprocess.run(["git", "add", "-A"], check=True, env=env, cwd=ws)
            subprocess.run(["git", "commit", "-qm", "b"], check=True, env=env, cwd=ws)

        rows.append(("baseline: git add -A + commit (fresh repo)", timed(fresh_git)))
        store = CheckpointStore(home, ws)
        first: list[str] = []
        rows.append(("first checkpoint", timed(lambda: first.append(store.snapshot("first", "b/1").id))))
        rows.append(("later checkpoint, nothing changed", timed(lambda: store.snapshot("same"))))
        laters = []
        for r in range(3):
            touch_some(ws, 5, r)
            laters.append(timed(lambda: store.snapshot("later")))
        rows.append(("later checkpoint, 5 files changed (median of 3)", sorted(laters)[1]))
        changed = touch_some(ws, 5, 99)
        rows.append(("restore 5 files (incl. its own checkpoint)", timed(lambda: store.restore(first[0], changed,
                                                                                               "restore"))))
        rows.append(("store size on disk (MB, not seconds)", store.size() / 1e6))
        return rows
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    sizes = [(1_000, 20_000_000)] + ([] if "--small" in sys.argv else [(10_000, 200_000_000)])
    for files, total in sizes:
        print(f"\n{files} files, {total / 1e6:.0f} MB")
        for name, value in bench(files, total):
            unit = "" if "MB" in name else " s"
            print(f"  {name:<52} {value:8.3f}{unit}")


if __name__ == "__main__":
    main()
