"""A fork's own working tree: a `git worktree` on a new branch, or a copy (reflink where supported).

`git worktree add` is the one place kimicode writes to the user's repository: it adds a branch
`kimicode/fork-<session id>` and a worktree entry (`.git/worktrees/`), both removed by
`kimicode sessions rm ID --remove-worktree`. The fork's tree starts as the workspace is now,
uncommitted and untracked (not ignored) files included: they are copied over from a checkpoint.
Trees live in `KIMICODE_HOME/worktrees/<session id>/`.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimicode.checkpoints.store import CheckpointError, CheckpointStore
from kimicode.gitrun import failure, run_git
from kimicode.safeio import private_dirs

MODES = ("worktree", "copy", "shared")


@dataclass(frozen=True)
class ForkTree:
    """Where a fork works: `kind` is `worktree` or `copy`; `workspace` is the path the agent uses."""

    kind: str
    root: Path
    workspace: Path
    repo: Path | None = None
    branch: str | None = None

    def record(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "root": str(self.root),
            "workspace": str(self.workspace),
            "repo": str(self.repo) if self.repo else None,
            "branch": self.branch,
        }


def _git(cwd: Path, *args: str) -> str:
    proc = run_git(cwd, *args)
    if proc.returncode != 0:
        raise CheckpointError(failure(args, proc))
    return proc.stdout


def repo_top(workspace: Path) -> Path | None:
    """The top of the git repository `workspace` is in (with at least one commit), or None."""
    try:
        top = _git(workspace, "rev-parse", "--show-toplevel").strip()
        _git(workspace, "rev-parse", "--verify", "-q", "HEAD")
    except (CheckpointError, OSError):
        return None
    return Path(top) if top else None


def make_tree(kind: str, workspace: Path, home: Path, session_id: str, *, branch: str | None = None) -> ForkTree:
    """Create the fork's tree; `worktree` falls back to a copy outside a git repository.

    `branch` names the git branch (default `kimicode/fork-<session_id>`; explorations use
    `kimicode/branch-<session>-<k>`)."""
    if kind not in ("worktree", "copy"):
        raise ValueError(f"workspace must be one of {', '.join(MODES)} (got {kind!r})")
    workspace = workspace.resolve()
    root = home.expanduser().resolve() / "worktrees" / session_id
    if root.exists():
        raise CheckpointError(f"{root} already exists")
    private_dirs(root.parent, top=root.parent.parent)  # KIMICODE_HOME/worktrees: 0700
    top = repo_top(workspace) if kind == "worktree" else None
    if top is None:
        proc = subprocess.run(
            ["cp", "-a", "--reflink=auto", f"{workspace}/.", str(root)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            shutil.rmtree(root, ignore_errors=True)
            raise CheckpointError(f"cannot copy the workspace: {proc.stderr.strip() or proc.returncode}")
        return ForkTree("copy", root, root)
    branch = branch or f"kimicode/fork-{session_id}"
    _git(top, "worktree", "add", "-q", "-b", branch, str(root), "HEAD")
    sub = root / workspace.relative_to(top)
    _carry_over(home, top, root)
    return ForkTree("worktree", root, sub, top, branch)


def _carry_over(home: Path, top: Path, root: Path) -> None:
    """Put the repository's uncommitted state (changed, deleted, untracked files) into the new worktree."""
    snap = CheckpointStore(home, top).snapshot("fork")  # what the workspace holds now (not ignored files)
    target = CheckpointStore(home, root)
    target.git_dir, target.index = CheckpointStore(home, top).git_dir, target.dir / "fork-index"
    try:
        target.dir.mkdir(parents=True, exist_ok=True)
        checked_out = _entries(_git(root, "ls-tree", "-r", "-z", "HEAD").encode("utf-8", "surrogateescape"))
        wanted = _entries(target.git("ls-tree", "-r", "-z", snap.id))
        for rel in checked_out.keys() - wanted.keys():
            (root / rel).unlink(missing_ok=True)
        differ = [rel for rel, entry in wanted.items() if checked_out.get(rel) != entry]
        target.git("read-tree", snap.id)
        if differ:  # only what differs from HEAD, already checked out: a 10,000-file tree is not written twice
            names = "\0".join(differ).encode("utf-8", "surrogateescape") + b"\0"
            target.git("checkout-index", "-f", "-z", "--stdin", input=names)
    finally:
        target.index.unlink(missing_ok=True)


def _entries(listing: bytes) -> dict[str, tuple[str, str]]:
    """`git ls-tree -r -z` output as {path: (mode, object id)}."""
    out: dict[str, tuple[str, str]] = {}
    for item in listing.decode("utf-8", "surrogateescape").split("\0"):
        if "\t" in item:
            head, path = item.split("\t", 1)
            mode, _kind, oid = head.split(" ", 2)
            out[path] = (mode, oid)
    return out


def remove_tree(info: dict[str, Any]) -> str:
    """Remove a fork's tree (and its branch when fully merged); returns what was done."""
    root = Path(str(info.get("root") or ""))
    if not root.is_absolute() or "worktrees" not in root.parts:
        raise CheckpointError(f"refusing to remove {root}: not a kimicode fork tree")
    if info.get("kind") == "worktree" and info.get("repo"):
        repo = Path(str(info["repo"]))
        _git(repo, "worktree", "remove", "--force", str(root))
        branch = str(info.get("branch") or "")
        try:
            _git(repo, "branch", "-d", branch)
            return f"removed the worktree {root} and the branch {branch}"
        except CheckpointError:
            return f"removed the worktree {root}; kept the branch {branch} (it has unmerged commits)"
    shutil.rmtree(root)
    return f"removed the copy {root}"


def fork_tree(mode: str, workspace: Path, home: str | Path | None) -> tuple[str | None, ForkTree | None]:
    """A new session id and its tree for a fork with workspace `mode` (`shared`: no tree, id None)."""
    if mode not in MODES:
        raise ValueError(f"workspace must be one of {', '.join(MODES)} (got {mode!r})")
    if mode == "shared":
        return None, None
    from kimicode.config.endpoint import kimicode_home
    from kimicode.session.log import new_session_id

    session_id = new_session_id()
    base = Path(home).expanduser() if home is not None else kimicode_home()
    return session_id, make_tree(mode, workspace, base, session_id)
