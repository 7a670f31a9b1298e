"""What checkpoints cost a headless run on a large workspace, beside plain git on the same tree.

For each generated tree (10k, 50k and 200k files by default; `--files 50000` for one), `kimicode -p` runs
one `write_file` in accept-edits against the fake server (a scripted tool call, then an answer), as:

- `off`: `[checkpoints] enabled = false` (the floor);
- `first`: a fresh KIMICODE_HOME, so the run stores the whole tree;
- `later`: the second and third runs into the same store (the tree changed by one file each time);

and prints wall time, peak memory (the run's process tree, `wait4`), the store's size on disk, and the
added wall of each against `off`. Beside them, on the same tree: `git add -A && git commit` into a fresh
repository (wall, peak memory, loose objects), a second `git add -A` with nothing changed, and the size
after `git gc` (the reference for a compact store). Targets (issue 40, 50k files / ~1 GB on 2 cores):
first run +1.5 s at most, later runs +0.2 s, peak memory 1.2x `off`, store 40% of the tree's bytes.

The generated tree mixes text and binary files as a language installation does: ~88% source-like text
files of a few kB, ~12% binary files (machine-code-like: short random runs repeated, compresses ~2-3x),
a few large ones (1-8 MB), and no `.gitignore`. The tree is written once per size and kept in
`--cache DIR` (default: a temporary directory removed at exit).

The lab's real-tree recipe (issue 40's figures): a Python installation with no `.gitignore`, e.g.
`cp -a "$(python3 -c 'import sys; print(sys.base_prefix)')" /tmp/realtree` (about 50k files, 1 GB with
a few packages installed), then `python tests/bench/checkpoints.py --tree /tmp/realtree`.

    python tests/bench/checkpoints.py [--files N ...] [--tree DIR] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from checkpoints_store import WORDS  # the same source-like vocabulary as the store-level bench (run from tests/bench)

from kimicode.testing import FakeServer, Reply, ToolCall

SIZES = {10_000: 200_000_000, 50_000: 1_000_000_000, 200_000: 2_000_000_000}
"""Files -> total bytes of the generated trees."""
OUT = "kimicode_bench_out.txt"


@dataclass
class Run:
    """One measured command: wall seconds, peak resident memory of its process tree (MB), and the CPU
    seconds (user + system) of its whole process tree, the steadier figure on a loaded machine."""

    wall: float
    peak_mb: float
    cpu: float


def corpus(rng: random.Random, size: int) -> bytes:
    """Source-like text to cut files from (lines of identifiers and hex numbers)."""
    lines = []
    total = 0
    while total < size:
        line = "    " + " ".join(rng.choice(WORDS) for _ in range(8)) + f"  # {rng.getrandbits(32):x}\n"
        lines.append(line)
        total += len(line)
    return "".join(lines).encode()


def binary_blob(rng: random.Random, size: int) -> bytes:
    """Machine-code-like bytes: random 16-byte runs drawn from a small pool (compresses ~2-3x)."""
    pool = [rng.randbytes(16) for _ in range(4096)]
    return b"".join(rng.choice(pool) for _ in range(size // 16 + 1))[:size]


def make_tree(root: Path, files: int, total: int) -> None:
    """A language-installation-like tree (see the module docstring)."""
    rng = random.Random(files)
    text = corpus(rng, 8 << 20)
    blob = binary_blob(rng, 24 << 20)
    large = max(4, files // 10_000)
    binaries = files // 8
    big_bytes = sum(1 << 20 << (i % 4) for i in range(large))
    avg_bin = max(4096, (total - big_bytes) * 4 // 10 // max(1, binaries))
    avg_text = max(512, (total - big_bytes) * 6 // 10 // max(1, files - binaries))
    for i in range(files):
        d = root / f"lib{i // 2000}" / f"pkg{(i // 100) % 20}"
        if i % 100 == 0:
            d.mkdir(parents=True, exist_ok=True)
        if i < large:
            size, src, name = 1 << 20 << (i % 4), blob, f"big{i}.so"
        elif i % 8 == 0:
            size, src, name = int(rng.expovariate(1 / avg_bin)) + 64, blob, f"mod{i}.so"
        else:
            size, src, name = int(rng.expovariate(1 / avg_text)) + 16, text, f"mod{i}.py"
        size = min(size, len(src) - 1)
        start = rng.randrange(0, len(src) - size)
        (d / name).write_bytes(src[start : start + size])


def tree_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and not f.is_symlink())


def measured(cmd: list[str], env: dict[str, str], cwd: Path) -> Run:
    """Run `cmd` to completion; its wall time and the peak RSS of its process tree (children waited)."""
    os.sync()  # the writeback of the step before is not charged to this one
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out = proc.stdout.read() if proc.stdout else b""
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {err.decode()[-2000:]} {out.decode()[-500:]}")
    return Run(took, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime)


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def kimicode_env(home: Path, server: FakeServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "KIMICODE_", "OPENAI_", "MOONSHOT_"))}
    env.update(KIMICODE_HOME=str(home), KIMI_API_KEY="sk-bench", KIMI_BASE_URL=server.base_url)
    return env


def one_write(server: FakeServer, home: Path, ws: Path, n: int) -> Run:
    """`kimicode -p` writing one file (a different content each run, so every run changes the tree)."""
    server.add(Reply(tool_calls=[ToolCall("write_file", {"path": OUT, "content": f"run {n}\n"})]), Reply("written"))
    cmd = [
        str(Path(sys.executable).parent / "kimicode"),
        "-p",
        "write the file",
        "--permission-mode",
        "accept-edits",
        "--output-format",
        "json",
    ]
    run = measured(cmd, kimicode_env(home, server), ws)
    if (ws / OUT).read_text() != f"run {n}\n":
        raise SystemExit("the run did not write the file")
    return run


def git_baseline(ws: Path, scratch: Path) -> dict[str, float]:
    """`git add -A && git commit` into a fresh repository outside the tree, a second `add -A`, and gc."""
    gd = scratch / "baseline.git"
    shutil.rmtree(gd, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "init", "-q", "--bare", str(gd)], check=True, env=env)
    env.update(
        GIT_DIR=str(gd),
        GIT_WORK_TREE=str(ws),
        GIT_INDEX_FILE=str(scratch / "baseline-index"),
        GIT_AUTHOR_NAME="b",
        GIT_AUTHOR_EMAIL="b@x",
        GIT_COMMITTER_NAME="b",
        GIT_COMMITTER_EMAIL="b@x",
    )
    subprocess.run(["git", "config", "gc.auto", "0"], check=True, env=env)
    first = measured(["sh", "-c", "git add -A && git commit -qm first"], env, ws)
    loose = du(gd)
    again = measured(["git", "add", "-A"], env, ws)
    subprocess.run(["git", "gc", "-q"], check=True, env=env, cwd=ws)
    packed = du(gd)
    shutil.rmtree(gd, ignore_errors=True)
    (scratch / "baseline-index").unlink(missing_ok=True)
    return {
        "git_wall": first.wall,
        "git_peak": first.peak_mb,
        "git_cpu": first.cpu,
        "git_again_cpu": again.cpu,
        "git_loose": loose,
        "git_again": again.wall,
        "git_gc": packed,
    }


def bench_tree(ws: Path, scratch: Path, runs: int) -> dict[str, float]:
    """Every figure for one tree (see the module docstring)."""
    row: dict[str, float] = {"files": sum(1 for f in ws.rglob("*") if f.is_file()), "bytes": tree_bytes(ws)}
    with FakeServer() as server:
        off_home = scratch / "home-off"
        off_home.mkdir(exist_ok=True)
        (off_home / "config.toml").write_text("[checkpoints]\nenabled = false\n")
        offs = [one_write(server, off_home, ws, n) for n in range(runs)]
        row["off_wall"] = statistics.median(r.wall for r in offs)
        row["off_peak"] = statistics.median(r.peak_mb for r in offs)
        row["off_cpu"] = statistics.median(r.cpu for r in offs)
        firsts, laters, stores = [], [], []
        for n in range(runs):
            home = scratch / f"home-{n}"
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir()
            firsts.append(one_write(server, home, ws, 100 + n))
            laters += [one_write(server, home, ws, 200 + n * 10 + k) for k in range(2)]
            time.sleep(0.2)
            stores.append(du(home / "checkpoints"))
            shutil.rmtree(home, ignore_errors=True)
    row["first_wall"] = statistics.median(r.wall for r in firsts)
    row["first_peak"] = statistics.median(r.peak_mb for r in firsts)
    row["first_cpu"] = statistics.median(r.cpu for r in firsts)
    row["later_cpu"] = statistics.median(r.cpu for r in laters)
    row["later_wall"] = statistics.median(r.wall for r in laters)
    row["later_peak"] = statistics.median(r.peak_mb for r in laters)
    row["store"] = statistics.median(stores)
    (ws / OUT).unlink(missing_ok=True)
    row.update(git_baseline(ws, scratch))
    return row


def report(rows: list[dict[str, float]]) -> None:
    def line(label: str, fmt: str, key: str | None = None, fn: object = None) -> None:
        cells = []
        for r in rows:
            value = fn(r) if callable(fn) else r[key or label]
            cells.append(f"{value:{fmt}}")
        print(f"{label:<44}" + "".join(f"{c:>20}" for c in cells))

    heads = [f"{int(r['files'])} files, {r['bytes'] / 1e6:.0f} MB" for r in rows]
    print(f"\n{'':<44}" + "".join(f"{h:>20}" for h in heads))
    line("checkpoints off: wall s", ".2f", "off_wall")
    line("first run: wall s", ".2f", "first_wall")
    line("  added wall s (target <= 1.5 at 50k)", "+.2f", fn=lambda r: r["first_wall"] - r["off_wall"])
    line("later runs: wall s", ".2f", "later_wall")
    line("  added wall s (target <= 0.2)", "+.2f", fn=lambda r: r["later_wall"] - r["off_wall"])
    line("CPU s (user+sys, whole tree): off", ".2f", "off_cpu")
    line("  first run, added", "+.2f", fn=lambda r: r["first_cpu"] - r["off_cpu"])
    line("  later runs, added", "+.2f", fn=lambda r: r["later_cpu"] - r["off_cpu"])
    line("checkpoints off: peak MB", ".0f", "off_peak")
    line("first run: peak MB (x off; target <= 1.2)", ".2f", fn=lambda r: r["first_peak"] / r["off_peak"])
    line("later runs: peak MB (x off)", ".2f", fn=lambda r: r["later_peak"] / r["off_peak"])
    line("store after 3 runs: MB", ".0f", fn=lambda r: r["store"] / 1e6)
    line("  share of tree bytes (target <= 40%)", ".0%", fn=lambda r: r["store"] / r["bytes"])
    line("git add -A + commit, fresh repo: wall s", ".2f", "git_wall")
    line("  its CPU s", ".2f", "git_cpu")
    line("  its peak MB", ".0f", "git_peak")
    line("  its loose objects MB", ".0f", fn=lambda r: r["git_loose"] / 1e6)
    line("git add -A again, nothing changed: wall s", ".2f", "git_again")
    line("  its CPU s", ".2f", "git_again_cpu")
    line("git gc of the same content: MB", ".0f", fn=lambda r: r["git_gc"] / 1e6)
    line("  share of tree bytes", ".0%", fn=lambda r: r["git_gc"] / r["bytes"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, action="append", help="generated tree sizes (10000, 50000, 200000)")
    parser.add_argument("--tree", type=Path, help="measure this tree (a copy is made) instead of generated ones")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--cache", type=Path, help="keep generated trees here between invocations")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="kc-cpbench-"))
    cache = args.cache or scratch / "trees"
    print(f"load average before: {os.getloadavg()[0]:.2f}; {args.runs} run(s) per figure, median", flush=True)
    try:
        rows = []
        if args.tree:
            ws = scratch / "tree"
            shutil.copytree(args.tree, ws, symlinks=True)
            rows.append(bench_tree(ws, scratch, args.runs))
        for files in args.files or sorted(SIZES):
            ws = cache / f"tree-{files}"
            if not ws.exists():
                print(f"generating {files} files ...", flush=True)
                make_tree(ws.with_suffix(".tmp"), files, SIZES.get(files, files * 20_000))
                ws.with_suffix(".tmp").rename(ws)
            rows.append(bench_tree(ws, scratch, args.runs))
            report(rows)
        print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
