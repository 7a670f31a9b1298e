"""Each task's own place: its workspace (copied, in place, or cloned) and its KIMICODE_HOME area.

Layout under the batch directory (beside RESULTS.jsonl, `RESULTS.batch/`):
`tasks/<name>/workspace` and `tasks/<name>/home`, where `<name>` is the id made safe for a file name.
Changed files are found by comparing a snapshot of (size, mtime, mode) taken before the run.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from kimicode.batch.tasks import Task

SKIP_DIRS = frozenset({".git", ".hg", ".svn"})
Snapshot = dict[str, str]


class WorkspaceError(RuntimeError):
    """The task's workspace could not be prepared (missing directory, failed clone)."""


def task_dir_name(task_id: str) -> str:
    """A file name for the id: safe characters kept, plus a short hash so distinct ids never collide."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", task_id)[:80]
    return f"{safe}-{hashlib.sha1(task_id.encode()).hexdigest()[:8]}"


def prepare(task: Task, area: Path) -> tuple[Path, Path]:
    """Create the task's workspace and home inside `area` (wiping what a previous attempt left)."""
    home = area / "home"
    ws = area / "workspace"
    if ws.exists() and not task.in_place:
        shutil.rmtree(ws)
    home.mkdir(parents=True, exist_ok=True)
    if task.repo is not None:
        _clone(task.repo, task.ref, ws)
        return ws, home
    if task.workspace is not None:
        source = Path(task.workspace).expanduser()
        if not source.is_dir():
            raise WorkspaceError(f"workspace is not a directory: {source}")
        if task.in_place:
            return source.resolve(), home
        shutil.copytree(source, ws, symlinks=True)
        return ws, home
    ws.mkdir(parents=True)
    return ws, home


def _git(args: list[str], cwd: Path | None = None, timeout: float = 600) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except FileNotFoundError:
        raise WorkspaceError("git is not installed (needed for repo tasks)") from None
    except subprocess.TimeoutExpired:
        raise WorkspaceError(f"git {args[0]} took longer than {timeout:.0f}s") from None
    if done.returncode != 0:
        raise WorkspaceError(f"git {args[0]} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def _clone(repo: str, ref: str | None, dest: Path) -> None:
    if repo.startswith("-") or (ref is not None and ref.startswith("-")):
        raise WorkspaceError("repo and ref may not start with '-'")
    _git(["clone", "--quiet", "--no-checkout" if ref else "--quiet", "--", repo, str(dest)])
    if ref:
        _git(["checkout", "--quiet", "--detach", ref, "--"], cwd=dest)


def snapshot(ws: Path) -> Snapshot:
    """Every file under `ws` (VCS directories skipped) mapped to its size, mtime and mode.

    A stat, not a hash: a task's workspace may hold a whole repository with its dependencies, and reading
    every byte twice per task would cost more than the task. Tools that write a file change its mtime.
    """
    out: Snapshot = {}
    for root, dirs, files in os.walk(ws):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for name in files:
            path = Path(root, name)
            rel = path.relative_to(ws).as_posix()
            try:
                st = path.lstat()
                if path.is_symlink():
                    out[rel] = "link:" + os.readlink(path)
                    continue
                out[rel] = f"{st.st_size}:{st.st_mtime_ns}:{st.st_mode}"
            except OSError:
                out[rel] = "unreadable"
    return out


def changed_files(before: Snapshot, after: Snapshot) -> list[str]:
    """Paths added, removed or modified between two snapshots, sorted."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def git_diff(ws: Path) -> str | None:
    """The workspace's diff against its HEAD, untracked files included; None when it is not a git checkout."""
    if not (ws / ".git").exists():
        return None
    try:
        _git(["add", "--intent-to-add", "--all"], cwd=ws, timeout=120)
        return _git(["diff", "--no-color", "--no-ext-diff"], cwd=ws, timeout=120)
    except WorkspaceError:
        return None
