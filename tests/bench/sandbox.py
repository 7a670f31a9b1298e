"""What the sandbox costs per bash command, side by side with running it unconfined:

    python tests/bench/sandbox.py [runs]

Each row runs a command `runs` times (default 20) through the bash tool's `run_shell`: plain (the
baseline), in the read-only profile (what the read-only allowance admits), in the workspace-write
profile, and in workspace-write with a per-command cgroup (where kimicode may make cgroups), and prints
the median milliseconds. The last table is what choosing the profile costs the permission decision
(the line is decided a second time as plan mode without rules) beside the decision alone.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from kimicode.permissions.bashcheck import decide_bash
from kimicode.permissions.engine import decide
from kimicode.permissions.policy import Policy
from kimicode.tools.base import ToolContext
from kimicode.tools.sandbox import Profile, Sandbox, probe, shared_cgroups
from kimicode.tools.shell import BASH, run_shell

COMMANDS = ["true", "echo hi", "ls -la /usr/bin | wc -l", "git --version", "git status --short"]
Wrap = Callable[[Sequence[str]], list[str]] | None


async def median_ms(command: str, cwd: str, wrap: Wrap, runs: int, cgroup: Sandbox | None = None) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        slot = cgroup.cgroups.slot(cgroup.limits) if cgroup is not None and cgroup.cgroups else None
        inner = wrap
        if slot is not None and wrap is not None:
            prefix = slot.prefix

            def inner(
                argv: Sequence[str], w: Callable[[Sequence[str]], list[str]] = wrap, p: list[str] = prefix
            ) -> list[str]:
                return [*p, *w(argv)]

        await run_shell(command, cwd=cwd, env=dict(os.environ), timeout=30, wrap=inner)
        if slot is not None:
            slot.release()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def profile(sandbox: Sandbox, name: Profile) -> Callable[[Sequence[str]], list[str]]:
    return lambda argv: sandbox.wrap(argv, name)


def decision_costs(ws: Path, runs: int = 200) -> None:
    ctx = ToolContext(workspace=ws)
    policy = Policy(workspace=ws)
    print(f"\n{'permission decision':34} {'decide_bash µs':>15} {'with profile µs':>16}")
    for line in ("ls -la", "git log --oneline -5 | head -3", "cat README.md | grep x | wc -l"):
        alone = _time(lambda line=line: decide_bash(BASH, {"command": line}, "default", ctx, policy), runs)
        both = _time(lambda line=line: decide(BASH, {"command": line}, "default", ctx, policy), runs)
        print(f"{line:34} {alone:15.0f} {both:16.0f}")


def _time(fn: Callable[[], object], runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def wrap_costs(sandbox: Sandbox, runs: int = 50) -> None:
    """Building a command's bwrap arguments: the whole `wrap`, beside its part that shows the user's
    toolchain from the environment and hides the secrets below what is shown (`sandbox_toolchains`)."""
    from kimicode.tools.sandbox_toolchains import home_toolchain_mounts, secret_masks, toolchain_places

    ws, home = os.path.realpath(sandbox.workspace), os.path.realpath(sandbox.user_home)
    whole = _time(lambda: sandbox.wrap(["true"]), runs)
    places = toolchain_places(ws, home, None)
    view = _time(lambda: secret_masks(home, [*home_toolchain_mounts(home), *toolchain_places(ws, home, None)]), runs)
    masks = len(secret_masks(home, [*home_toolchain_mounts(home), *places])) // 3
    print(f"\n{'bwrap arguments':34} {'wrap µs':>15} {'toolchain+secrets µs':>21}")
    print(f"{f'{len(places)} env places, {masks} masks':34} {whole:15.0f} {view:21.0f}")


async def main(runs: int) -> None:
    status = probe()
    if not status.available or status.bwrap is None:
        print(f"sandbox unavailable here: {status.reason}")
        return
    with tempfile.TemporaryDirectory() as ws:
        subprocess.run(["git", "init", "-q", ws], check=True)  # noqa: ASYNC221 - set-up, before timing
        sandbox = Sandbox(Path(ws), status.bwrap, auto=True, cgroups=shared_cgroups())
        cg = "yes" if sandbox.cgroups else "no (rlimits only)"
        print(f"median of {runs} runs; per-command cgroups here: {cg}")
        print(f"{'command':26} {'plain ms':>9} {'read-only':>10} {'ws-write':>9} {'+cgroup':>8} {'extra ms':>9}")
        for command in COMMANDS:
            plain = await median_ms(command, ws, None, runs)
            read_only = await median_ms(command, ws, profile(sandbox, "read-only"), runs)
            write = await median_ms(command, ws, profile(sandbox, "workspace-write"), runs)
            grouped = await median_ms(command, ws, profile(sandbox, "workspace-write"), runs, sandbox)
            print(f"{command:26} {plain:9.1f} {read_only:10.1f} {write:9.1f} {grouped:8.1f} {read_only - plain:9.1f}")
        decision_costs(Path(ws))
        wrap_costs(sandbox)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
