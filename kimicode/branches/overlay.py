"""Branch workspaces that hold only what the branch changed: an overlay over a snapshot of the workspace.

Layout under `KIMICODE_HOME/worktrees/` (all 0700):

- `base-<exploration>/tree`: the workspace as the parent's checkpoint holds it at fork time (tracked and
  untracked files, not ignored ones), written once per exploration and shared by its branches: the
  branches see a stable workspace whatever the user does meanwhile. Its checkpoint index (stat data of
  these files) seeds every branch's checkpoint store, so a branch's first checkpoint hashes only what it
  changed.
- `branch-<session>-<k>/tree`: the branch's workspace, an overlay mounted in the branches' own namespace
  (kimicode/branches/userns.py, kimicode/branches/child.py) with the snapshot on top of the live workspace
  below it (for what a checkpoint leaves out: ignored files such as `.venv` or `node_modules`, files above
  the size limit, and `.git`, so git works in a branch); `upper/` receives what the branch writes, and
  only that (a deletion is a whiteout there); `work/` is overlayfs's. Outside that namespace `tree/` is an
  empty directory: the branch's files are read from its checkpoints (`kimicode branches show`, apply), or
  put in a real tree on demand by `open_tree` (`kimicode branches open`): a git worktree on branch
  `kimicode/branch-<session>-<k>` in a git repository, a plain directory elsewhere.

Nothing the branch does can write below it: overlayfs copies a file up before changing it, so the
snapshot and the user's workspace (and `.git`) are never written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from kimicode.checkpoints.forks import repo_top
from kimicode.checkpoints.store import CheckpointError, CheckpointStore, store_dir
from kimicode.gitrun import failure, run_git
from kimicode.safeio import private_dirs, private_write

OVERLAY_ENV = "KIMICODE_BRANCH_OVERLAY"
"""Set to 0 to give every branch a full git worktree (or copy) instead of an overlay."""
OFF_VALUES = ("0", "off", "no", "false")

_PROBE = (
    "import json, sys\n"
    "sys.path[:0] = json.loads(sys.argv[2])\n"
    "from kimicode.branches.userns import probe\n"
    "try:\n"
    "    probe(sys.argv[1])\n"
    "except OSError as exc:\n"
    "    print(exc.strerror or exc, file=sys.stderr)\n"
    "    sys.exit(3)\n"
)
_probed: dict[str, str | None] = {}


def rmtree(path: Path) -> None:
    """Remove a tree kimicode made, including overlayfs's work directories (mode 000) and whiteouts."""

    def retry(func: Any, name: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(name), 0o700)
            if os.path.isdir(name) and not os.path.islink(name):
                os.chmod(name, 0o700)
                shutil.rmtree(name, ignore_errors=True)
            else:
                func(name)
        except OSError:
            pass

    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, onerror=retry)


def unavailable(home: Path, workspace: Path) -> str | None:
    """Why branch workspaces cannot be overlays here (None: they can). The system is probed once per
    process and file system (a throwaway child mounts a tiny overlay in a namespace of its own: ~50 ms)."""
    value = os.environ.get(OVERLAY_ENV, "").strip().lower()
    if value in OFF_VALUES:
        return f"{OVERLAY_ENV}={value} turns overlay workspaces off"
    if not sys.platform.startswith("linux"):
        return f"overlay workspaces need Linux's user namespaces (this is {sys.platform})"
    home = Path(home).expanduser().resolve()
    workspace = workspace.resolve()
    if home == workspace or workspace in home.parents:
        return f"KIMICODE_HOME ({home}) is inside the workspace, and an overlay cannot sit on top of itself"
    why = git_outside(workspace)
    if why is not None:
        return why
    trees = private_dirs(home / "worktrees", top=home)
    key = str(os.stat(trees).st_dev)  # what decides: the kernel, and the file system the upper directories are on
    if key not in _probed:
        _probed[key] = _probe(trees)
    return _probed[key]


def git_outside(workspace: Path) -> str | None:
    """Why the workspace's git repository lies outside the overlay (None: it is inside, or there is none).

    A linked worktree's or a `--separate-git-dir` checkout's `.git` is a file naming a directory elsewhere:
    a branch's `git commit` or `git checkout` would write that directory (the user's real branches, HEAD
    and index) through no overlay at all, so such a workspace gets worktree branches instead."""
    if not os.path.lexists(workspace / ".git"):
        return None  # no repository here; or the workspace is a subdirectory of one, which a branch never sees
    try:
        proc = run_git(workspace, "rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir", timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    for line in proc.stdout.splitlines():
        where = Path(line).resolve()
        if not where.is_relative_to(workspace):
            return (
                f"the workspace's git repository is outside it ({where}: a linked worktree or a separate "
                "git directory), which an overlay cannot keep a branch's git from writing"
            )
    return None


def _probe(trees: Path) -> str | None:
    scratch = Path(tempfile.mkdtemp(prefix=".probe-", dir=trees))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE, str(scratch), json.dumps(sys.path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the overlay probe could not run ({exc})"
    finally:
        rmtree(scratch)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        why = lines[-1] if lines else f"exit {proc.returncode}"
        return f"this system does not let kimicode mount an overlay in a user namespace ({why})"
    return None


def base_dir(home: Path, exploration_id: str) -> Path:
    return Path(home).expanduser().resolve() / "worktrees" / f"base-{exploration_id}"


def ensure_base(home: Path, workspace: Path, exploration_id: str, parent_session: str) -> Path:
    """The exploration's snapshot directory (made on first use, from a checkpoint of the workspace now)."""
    base = base_dir(home, exploration_id)
    if (base / "commit").is_file():
        return base
    rmtree(base)  # half made by an earlier, interrupted attempt
    private_dirs(base / "tree", top=base.parent.parent)
    parent = CheckpointStore(home, workspace)
    snap = parent.snapshot(f"base of exploration {exploration_id}", f"{parent_session}/explore-{exploration_id}-base")
    CheckpointStore(home, base / "tree").seed(parent, snap.id)
    private_write(base / "commit", snap.id)
    return base


def create_overlay_tree(
    workspace: Path, home: Path, parent_session: str, k: int, exploration_id: str, branch: str
) -> dict[str, Any]:
    """Make branch `k`'s directories and checkpoint store; returns its tree record (mounted by the child)."""
    home = Path(home).expanduser().resolve()
    workspace = workspace.resolve()
    base = ensure_base(home, workspace, exploration_id, parent_session)
    root = home / "worktrees" / f"branch-{parent_session}-{k}"
    if root.exists():
        raise CheckpointError(f"{root} already exists")
    try:
        for name in ("upper", "work", "tree"):
            private_dirs(root / name, top=root.parent)
        index = CheckpointStore(home, base / "tree").index
        CheckpointStore(home, root / "tree").seed(CheckpointStore(home, workspace), "", index=index)
    except BaseException:
        rmtree(root)
        shutil.rmtree(store_dir(home, root / "tree"), ignore_errors=True)
        raise
    return {
        "kind": "overlay",
        "root": str(root),
        "workspace": str(root / "tree"),
        "repo": _repo(workspace),
        "branch": branch,
        "base": str(base),
        "live": str(workspace),
    }


def _repo(workspace: Path) -> str | None:
    top = repo_top(workspace)
    return str(top) if top is not None else None


def mount_spec(tree: dict[str, Any]) -> dict[str, Any]:
    """What the branches' process mounts for this tree (see `kimicode.branches.userns.mount_overlay`)."""
    root = Path(str(tree["root"]))
    return {
        "target": str(tree["workspace"]),
        "lowers": [str(Path(str(tree["base"])) / "tree"), str(tree["live"])],
        "upper": str(root / "upper"),
        "work": str(root / "work"),
    }


def _checked_root(home: Path, tree: dict[str, Any], key: str, prefix: str) -> Path:
    """The record's directory `key`, only if it is one of kimicode's own: `KIMICODE_HOME/worktrees/<prefix>*`
    (the record is data: a damaged one must not point a removal at the user's files)."""
    path = Path(str(tree.get(key) or ""))
    if path.parent != Path(home).expanduser().resolve() / "worktrees" or not path.name.startswith(prefix):
        raise CheckpointError(f"refusing to remove {path}: not a kimicode branch's directory")
    return path


def remove_overlay_tree(home: Path, tree: dict[str, Any]) -> str:
    """Remove an overlay branch's directories (and its opened worktree and git branch, if any)."""
    root = _checked_root(home, tree, "root", "branch-")
    done = f"removed the branch workspace {root}"
    opened = tree.get("opened")
    if isinstance(opened, str) and opened:
        _remove_opened(home, tree, Path(opened), root)
        done += f" and its opened tree {opened}"
    rmtree(root)
    return done


def _remove_opened(home: Path, tree: dict[str, Any], opened: Path, root: Path) -> None:
    if opened.parent != root:
        raise CheckpointError(f"refusing to remove {opened}: not inside {root}")
    shutil.rmtree(store_dir(Path(home).expanduser().resolve(), opened), ignore_errors=True)
    branch = str(tree.get("branch") or "")
    if tree.get("repo") and branch.startswith("kimicode/branch-"):
        for args in (["worktree", "remove", "--force", str(opened)], ["worktree", "prune"], ["branch", "-D", branch]):
            run_git(str(tree["repo"]), *args)


def remove_base(home: Path, tree: dict[str, Any]) -> str | None:
    """Remove an exploration's snapshot directory (when its last overlay branch goes)."""
    if not tree.get("base"):
        return None
    base = _checked_root(home, tree, "base", "base-")
    shutil.rmtree(store_dir(Path(home).expanduser().resolve(), base / "tree"), ignore_errors=True)
    rmtree(base)
    return f"removed the exploration's snapshot {base}"


def open_tree(home: Path, tree: dict[str, Any], snapshot: str) -> tuple[Path, bool]:
    """Put the branch's files (snapshot `snapshot` of its checkpoint store) in a real directory,
    `branch-<session>-<k>/open`: in a git repository a worktree on branch `kimicode/branch-<session>-<k>`
    (from HEAD, the branch's changes and the carried-over ones uncommitted, as `git status` shows),
    elsewhere a plain directory. Returns the directory (the workspace part of it) and whether it was
    made now (False: it was open already)."""
    home = Path(home).expanduser().resolve()
    root = _checked_root(home, tree, "root", "branch-")
    opened = root / "open"
    live = Path(str(tree["live"]))
    repo = Path(str(tree["repo"])) if tree.get("repo") else None
    sub = live.relative_to(repo) if repo is not None and live.is_relative_to(repo) else Path()
    if opened.exists():
        return opened / sub, False
    source = CheckpointStore(home, Path(str(tree["workspace"])))
    try:
        if repo is not None:
            _git(
                repo,
                "worktree",
                "add",
                "-q",
                *(["--no-checkout"] if sub == Path() else []),
                "-b",
                str(tree["branch"]),
                str(opened),
                "HEAD",
            )
            if sub == Path():
                _git(opened, "read-tree", "HEAD")
            else:
                rmtree(opened / sub)
        private_dirs(opened / sub, top=root)
        CheckpointStore(home, opened / sub).seed(source, snapshot)
    except (CheckpointError, OSError):
        if repo is not None:
            _remove_opened(home, tree, opened, root)
        rmtree(opened)
        raise
    return opened / sub, True


def _git(cwd: Path, *args: str) -> None:
    proc = run_git(cwd, *args)
    if proc.returncode != 0:
        raise CheckpointError(failure(args, proc))
