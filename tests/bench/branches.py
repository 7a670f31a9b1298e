"""What branches cost, beside one branch: wall time, disk, creation time, prefix-cache share.

    python tests/bench/branches.py [--delay 1.0] [--files 10000] [--quick]

1. Wall time of an exploration for N = 1, 2, 4, 8 overlay branches (and worktree branches, the fallback,
   measured right after each at the same load) at a realistic request delay (`--delay`, default
   1.0 s per model request: a kimi-k3 tool step takes ~1-3 s). The parent session has read a 40 KB file
   first (its history is the shared prefix); each branch then makes 3 tool steps (read, write, run a
   command) and answers: 4 requests, then the verify command. The fake server runs in its own process and
   simulates a prefix cache: a request's cached tokens are the bytes it shares with the longest earlier
   request under the same prompt cache key (bytes / 4). Target: N = 4 within 1.3x of one branch.
2. Creating one branch of a git repository of `--files` source-like files (about 4 KB each, some
   uncommitted changes), as an overlay and as a worktree: the time, the branch's first checkpoint after it
   changed one file, and the extra disk (its workspace, its checkpoint store; an overlay exploration also
   writes one snapshot shared by its branches), beside `git worktree add` alone and `cp -a` of the tree.
   Target: under 1 s; extra disk per branch: the changed files only.
3. The cached share of the branches' prompt tokens (from 1).
Each timing is the median of 3 runs (creation) or one run per N (wall time).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def common_prefix(a: bytes, b: bytes) -> int:
    """How many leading bytes `a` and `b` share (binary search on slices: fast for long bodies)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def serve(port_out: Any, stop: Any, delay: float) -> None:
    """The fake model in its own process, with a simulated prefix cache per prompt cache key."""
    import threading

    from kimicode.testing import FakeServer, RecordedRequest, Reply, ToolCall

    seen: dict[str, list[bytes]] = {}
    lock = threading.Lock()

    def cached(req: RecordedRequest) -> tuple[int, int]:
        body = req.raw
        key = str(req.body.get("prompt_cache_key"))
        with lock:
            best = 0
            for old in seen.get(key, []):
                n = common_prefix(old, body)
                best = max(best, n)
            seen.setdefault(key, []).append(body)
        return len(body) // 4, best // 4

    def script(req: RecordedRequest) -> Reply:
        _, hit = cached(req)
        msgs = req.body["messages"]
        tools = sum(1 for m in msgs if m["role"] == "tool")
        user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
        done = sum(1 for m in msgs[user:] if m["role"] == "tool")
        kw: dict[str, Any] = {"first_delay": delay, "cached_tokens": hit}  # prompt tokens: body bytes / 4
        if "read the big file" in str(msgs[user]["content"]):
            if tools == 0:
                return Reply(tool_calls=[ToolCall("read_file", {"path": "big.txt"})], **kw)
            return Reply(content="read it", **kw)
        branch = req.headers.get("x-kimicode-branch", "0")
        fixed = f"def add(a, b):\n    return a + b  # {branch}\n"
        steps = [
            ToolCall("read_file", {"path": "app.py"}),
            ToolCall("write_file", {"path": "app.py", "content": fixed}),
            ToolCall("bash", {"command": "python3 -c 'import app; print(app.add(2, 3))'"}),
        ]
        if done < len(steps):
            return Reply(tool_calls=[steps[done]], **kw)
        return Reply(content=f"fixed in branch {branch}", **kw)

    with FakeServer([script] * 100000) as server:
        port_out.send(server.base_url)
        stop.wait()


def project(ws: Path, files: int, size: int = 4096) -> None:
    """A git repository of `files` source-like files in nested directories, committed, plus some changes."""
    rng = random.Random(7)
    words = [("".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 9)))) for _ in range(500)]
    ws.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        d = ws / f"pkg{i % 50}" / f"mod{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        line = " ".join(rng.choice(words) for _ in range(12)) + "\n"
        (d / f"f{i}.py").write_text(line * max(1, size // len(line)))
    (ws / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (ws / "big.txt").write_text("some context line\n" * 2300)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@x",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@x",
    }
    for args in (["init", "-q"], ["config", "gc.auto", "0"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=ws, env=env, check=True, capture_output=True)
    for i in range(5):  # uncommitted work the branches must start from
        (ws / f"pkg{i}" / f"mod{i % 7}" / f"f{i}.py").write_text("changed\n")
    (ws / "notes.txt").write_text("untracked\n")


def du(path: Path) -> int:
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) * 1024


async def explore_once(ws: Path, home: Path, url: str, n: int) -> dict[str, Any]:
    from kimicode import Agent

    parent = Agent(
        base_url=url,
        api_key="sk-bench",
        model="kimi-k3",
        workspace=ws,
        home=home,
        permission_mode="yolo",
        sandbox="off",
    )
    try:
        await parent.run("read the big file")
        start = time.monotonic()
        ex = await parent.explore(
            "fix add", n=n, verify="python3 -c 'import app; assert app.add(2, 3) == 5'", apply=False
        )
        wall = time.monotonic() - start
    finally:
        await parent.aclose()
    shares = [b.cached_share for b in ex.branches]
    return {
        "wall": wall,
        "verified": sum(1 for b in ex.branches if b.verified),
        "share": statistics.mean(shares),
        "min_share": min(shares),
    }


def wall_times(url: str, tmp: Path, levels: list[int]) -> dict[tuple[str, int], dict[str, Any]]:
    """Each N with overlay branches and, right after it (same load), with worktrees (the fallback)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    ws, home = tmp / "warm" / "ws", tmp / "warm" / "home"
    project(ws, 20)
    asyncio.run(explore_once(ws, home, url, 1))  # imports and the overlay probe, paid once per process
    for n in levels:
        for kind in ("overlay", "worktree"):
            ws, home = tmp / f"wall{n}{kind}" / "ws", tmp / f"wall{n}{kind}" / "home"
            project(ws, 200)
            os.environ["KIMICODE_BRANCH_OVERLAY"] = "1" if kind == "overlay" else "0"
            out[kind, n] = asyncio.run(explore_once(ws, home, url, n))
    os.environ.pop("KIMICODE_BRANCH_OVERLAY", None)
    return out


BRANCH_STEP = r"""
import json, sys, time
from pathlib import Path
from kimicode.branches import userns
spec, home = json.loads(sys.argv[1]), Path(sys.argv[2])
userns.enter()
userns.mount_overlay(spec["target"], spec["lowers"], spec["upper"], spec["work"])
userns.lock()
from kimicode.checkpoints.store import CheckpointStore
(Path(spec["target"]) / "app.py").write_text("def add(a, b):\n    return a + b\n")
t = time.monotonic()
CheckpointStore(home, Path(spec["target"])).snapshot("the branch's first checkpoint")
print(time.monotonic() - t)
"""
"""One overlay branch's first step, in a namespace as the branches' process makes it: change a file, checkpoint."""


def overlay_creation(ws: Path, home: Path, runs: int) -> dict[str, list[float]]:
    """The overlay branch (the default on Linux): its creation (the first branch of an exploration also
    writes the exploration's snapshot), its first checkpoint after changing one file, and its disk."""
    import json

    from kimicode.branches.overlay import mount_spec
    from kimicode.branches.trees import create_overlay
    from kimicode.checkpoints.store import store_dir

    figures: dict[str, list[float]] = {k: [] for k in ("first", "next", "first_cp", "upper", "store", "base")}
    for r in range(runs):
        os.sync()
        t = time.monotonic()
        tree = create_overlay(ws, home, f"ov{r}", 1, f"bench{r}")
        figures["first"].append(time.monotonic() - t)
        t = time.monotonic()
        create_overlay(ws, home, f"ov{r}", 2, f"bench{r}")
        figures["next"].append(time.monotonic() - t)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = subprocess.run(
            [sys.executable, "-c", BRANCH_STEP, json.dumps(mount_spec(tree)), str(home)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        figures["first_cp"].append(float(out.strip().splitlines()[-1]))
        figures["upper"].append(du(Path(tree["root"])))
        figures["store"].append(du(store_dir(home.resolve(), Path(tree["workspace"]))))
        figures["base"].append(du(Path(tree["base"])))
    return figures


def creation(tmp: Path, files: int, runs: int = 3) -> dict[str, list[float]]:
    from kimicode.branches.trees import create_tree
    from kimicode.checkpoints.store import CheckpointStore

    ws = tmp / "big" / "ws"
    project(ws, files)
    home = tmp / "big" / "home"
    CheckpointStore(home, ws).snapshot("parent's first checkpoint")  # the parent session has one already
    figures: dict[str, list[float]] = {
        k: [] for k in ("create", "first_cp", "disk_tree", "disk_store", "worktree_add", "cp_a")
    }
    for r in range(runs):
        os.sync()
        t = time.monotonic()
        tree = create_tree(ws, home, f"bench{r}", 1)
        figures["create"].append(time.monotonic() - t)
        (tree.workspace / "app.py").write_text("def add(a, b):\n    return a + b\n")
        t = time.monotonic()
        store = CheckpointStore(home, tree.workspace)
        store.snapshot("the branch's first checkpoint")
        figures["first_cp"].append(time.monotonic() - t)
        figures["disk_tree"].append(du(tree.root))
        figures["disk_store"].append(du(store.dir))
        os.sync()
        t = time.monotonic()
        plain = tmp / "big" / f"plain{r}"
        subprocess.run(
            ["git", "worktree", "add", "-q", "-b", f"plain{r}", str(plain), "HEAD"],
            cwd=ws,
            check=True,
            capture_output=True,
        )
        figures["worktree_add"].append(time.monotonic() - t)
        os.sync()
        t = time.monotonic()
        subprocess.run(["cp", "-a", str(ws), str(tmp / "big" / f"copy{r}")], check=True)
        figures["cp_a"].append(time.monotonic() - t)
    figures["workspace"] = [float(du(ws) - du(ws / ".git"))]
    figures.update({f"ov_{k}": v for k, v in overlay_creation(ws, home, runs).items()})
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--delay", type=float, default=1.0)
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--quick", action="store_true", help="N = 1, 2 only, 1000 files, one run (a smoke test)")
    args = ap.parse_args()
    levels = [1, 2] if args.quick else [1, 2, 4, 8]
    files = 1000 if args.quick else args.files
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    stop = ctx.Event()
    server = ctx.Process(target=serve, args=(send, stop, args.delay), daemon=True)
    server.start()
    url = recv.recv()
    tmp = Path(tempfile.mkdtemp(prefix="kimicode-bench-branches-"))
    os.environ["KIMICODE_HOME"] = str(tmp / "home")
    try:
        print(f"load average before: {os.getloadavg()[0]:.1f}")
        walls = wall_times(url, tmp, levels)
        print(
            f"\n## wall time of an exploration ({args.delay:g} s per model request, 4 requests + verify per branch;"
            " overlay branches, and worktrees right after at the same load)"
        )
        print(
            f"{'branches':>9} {'overlay s':>10} {'x one':>6} {'worktree s':>11} {'x one':>6} {'verified':>9} "
            f"{'cached share':>13}"
        )
        for n in levels:
            f, w = walls["overlay", n], walls["worktree", n]
            print(
                f"{n:>9} {f['wall']:>10.2f} {f['wall'] / walls['overlay', 1]['wall']:>6.2f} {w['wall']:>11.2f} "
                f"{w['wall'] / walls['worktree', 1]['wall']:>6.2f} {f['verified']:>9} "
                f"{f['share']:>12.0%} (min {f['min_share']:.0%})"
            )
        figs = creation(tmp, files, 1 if args.quick else 3)
        med = {k: statistics.median(v) for k, v in figs.items()}
        mb = 1024 * 1024
        print(
            f"\n## one branch of a {files}-file repository ({med['workspace'] / mb:.0f} MB of files; median of "
            f"{len(figs['create'])}; the branch changes one file)"
        )
        print(f"{'':<52} {'overlay':>10} {'worktree':>10}")
        row = "{:<52} {:>10} {:>10}"
        print(
            row.format(
                "create the first branch of an exploration", f"{med['ov_first']:.3f} s", f"{med['create']:.3f} s"
            )
        )
        print(row.format("create each further branch", f"{med['ov_next']:.3f} s", f"{med['create']:.3f} s"))
        print(
            row.format(
                "the branch's first checkpoint (one file changed)",
                f"{med['ov_first_cp']:.3f} s",
                f"{med['first_cp']:.3f} s",
            )
        )
        print(
            row.format(
                "extra disk per branch: its workspace",
                f"{med['ov_upper'] / mb:.2f} MB",
                f"{med['disk_tree'] / mb:.1f} MB",
            )
        )
        print(
            row.format(
                "extra disk per branch: its checkpoint store",
                f"{med['ov_store'] / mb:.2f} MB",
                f"{med['disk_store'] / mb:.1f} MB",
            )
        )
        print(row.format("extra disk per exploration: the shared snapshot", f"{med['ov_base'] / mb:.1f} MB", "-"))
        print(f"{'  baseline: git worktree add alone':<52} {med['worktree_add']:>10.3f} s")
        print(f"{'  baseline: cp -a of the workspace':<52} {med['cp_a']:>10.3f} s")
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        stop.set()
        server.join(5)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
