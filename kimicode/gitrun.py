"""One way to run git for kimicode's own bookkeeping: checkpoint stores, fork and branch worktrees.

Every such command runs with the environment scrubbed of `GIT_*` variables: a `GIT_DIR`, `GIT_WORK_TREE` or
`GIT_INDEX_FILE` left in the user's shell (or set by the git hook that started kimicode) would point it at another
repository, index or tree. Prompts are off (nobody is there to answer) and output is captured.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

__all__ = ["failure", "git_env", "run_git"]


def git_env(**extra: str) -> dict[str, str]:
    """This process's environment without any `GIT_*` variable, prompts off, then `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env.update(extra)
    return env


def run_git(cwd: Path | str, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """`git ARGS` in `cwd` with the scrubbed environment, text output captured; never raises on git's exit code
    (OSError when git cannot be started, TimeoutExpired after `timeout`)."""
    return subprocess.run(
        ["git", *args], cwd=cwd, env=git_env(), capture_output=True, text=True, timeout=timeout, check=False
    )


def failure(args: Sequence[str], proc: subprocess.CompletedProcess[str]) -> str:
    """`git SUBCOMMAND failed: <git's last line of stderr>` (its exit code when it said nothing)."""
    lines = proc.stderr.strip().splitlines()
    return f"git {args[0]} failed: {lines[-1] if lines else proc.returncode}"
