"""A branch's own workspace: a git worktree on `kimicode/branch-<session>-<k>`, or a copy outside git.

Built on `kimicode.checkpoints.forks` (the tree a `--fork --worktree` gets). What this module adds: the
branch's name, and cleaning up after a failed creation (a full disk half-way through `git worktree add`
or the copy) so that no worktree entry, branch or half-written directory is left behind.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

from kimicode.checkpoints.forks import ForkTree, make_tree, remove_tree, repo_top
from kimicode.checkpoints.store import CheckpointError, CheckpointStore
from kimicode.gitrun import failure, run_git


class TreeError(CheckpointError):
    """A branch's workspace could not be made (the message says why in plain words)."""


def git_branch_name(parent_session: str, k: int) -> str:
    return f"kimicode/branch-{parent_session}-{k}"


def create_tree(workspace: Path, home: Path, parent_session: str, k: int, kind: str = "worktree") -> ForkTree:
    """Make branch `k`'s tree from the workspace as it is now (uncommitted and untracked files included).

    Raises TreeError, having removed whatever was half made, when it cannot (a full disk, git failing)."""
    name = f"branch-{parent_session}-{k}"
    branch = git_branch_name(parent_session, k)
    root = Path(home).expanduser().resolve() / "worktrees" / name
    try:
        top = repo_top(workspace) if kind == "worktree" else None
        if top is not None and top == workspace.resolve():
            return _seeded_worktree(top, Path(home), root, branch, parent_session, k)
        return make_tree(kind, workspace, home, name, branch=branch)
    except (CheckpointError, OSError) as exc:
        why = _plain(exc, root.parent)  # before cleaning up: the half-made tree is what filled the disk
        _clean(workspace, root, branch)
        raise TreeError(f"could not create branch {k}'s workspace: {why}") from exc


def create_overlay(workspace: Path, home: Path, parent_session: str, k: int, exploration_id: str) -> dict[str, Any]:
    """Make branch `k`'s overlay directories (kimicode/branches/overlay.py); returns the tree's record.

    Raises TreeError, having removed whatever was half made, when it cannot (a full disk)."""
    from kimicode.branches.overlay import create_overlay_tree

    root = Path(home).expanduser().resolve() / "worktrees"
    try:
        return create_overlay_tree(
            workspace, home, parent_session, k, exploration_id, git_branch_name(parent_session, k)
        )
    except (CheckpointError, OSError) as exc:
        raise TreeError(f"could not create branch {k}'s workspace: {_plain(exc, root)}") from exc


def _seeded_worktree(top: Path, home: Path, root: Path, branch: str, parent_session: str, k: int) -> ForkTree:
    """A worktree whose files are written once, from the parent's checkpoint of the workspace as it is now
    (uncommitted and untracked files included, ignored ones not), into a branch checkpoint store that
    borrows the parent store's objects: no second copy of every file in a new store, no hashing of the
    whole tree at the branch's first change. The worktree's own git index is HEAD's (`git status` in it
    shows the carried-over changes, as in the workspace)."""
    root.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if root.exists():
        raise CheckpointError(f"{root} already exists")

    def git(cwd: Path, *args: str) -> None:
        proc = run_git(cwd, *args)
        if proc.returncode != 0:
            raise CheckpointError(failure(args, proc))

    git(top, "worktree", "add", "--no-checkout", "-q", "-b", branch, str(root), "HEAD")
    git(root, "read-tree", "HEAD")
    parent = CheckpointStore(home, top)
    base = parent.snapshot(f"base of branch {k}", f"{parent_session}/branch-{k}-base")  # keeps it referenced
    CheckpointStore(home, root).seed(parent, base.id)
    return ForkTree("worktree", root.resolve(), root.resolve(), top, branch)


FULL_BELOW = 1 << 20
"""Bytes free under which a failed creation is put down to a full disk (git's own messages rarely say so)."""


def _plain(exc: BaseException, where: Path) -> str:
    text = str(exc)
    full = (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "No space left" in text
    try:
        st = os.statvfs(where)
        free = st.f_bavail * st.f_frsize
    except OSError:
        free = FULL_BELOW
    if full or free < FULL_BELOW:
        return f"the disk holding {where} is full ({free // 1024} KB free; {text})"
    return text


def _clean(workspace: Path, root: Path, branch: str) -> None:
    """Undo a half-made tree: its worktree entry, its branch, its directory."""
    top = repo_top(workspace)
    if top is not None:
        for args in (["worktree", "remove", "--force", str(root)], ["worktree", "prune"], ["branch", "-D", branch]):
            run_git(top, *args)
    shutil.rmtree(root, ignore_errors=True)


def remove_branch_tree(tree: dict[str, Any] | None) -> str:
    """Remove a branch's workspace and its git branch (even when it holds commits: the branch is the
    exploration's, and the chosen one's changes were applied already). Returns what was done.

    Only a tree under a `worktrees` directory on a `kimicode/branch-` branch is touched (the record is
    data: a damaged one must not point this at anything else)."""
    if not tree:
        return "no workspace to remove"
    root = Path(str(tree.get("root") or ""))
    branch = str(tree.get("branch") or "")
    repo = Path(str(tree["repo"])) if tree.get("repo") else None
    if not root.is_absolute() or root.parent.name != "worktrees" or not root.name.startswith("branch-"):
        raise CheckpointError(f"refusing to remove {root}: not a kimicode branch's tree")
    if tree.get("kind") == "worktree" and (repo is None or not branch.startswith("kimicode/branch-")):
        raise CheckpointError(f"refusing to remove {root}: its record names no kimicode branch")
    if tree.get("kind") != "worktree":
        shutil.rmtree(root, ignore_errors=True)
        return f"removed the copy {root}"
    assert repo is not None
    try:
        remove_tree(tree)
    except CheckpointError:
        pass  # a worktree git no longer knows (moved, half-removed): cleaned up below
    _clean(repo, root, branch)
    return f"removed the worktree {root} and the branch {branch}"
