"""The file system a sandboxed command sees, as bubblewrap arguments (used by `kimicode.tools.sandbox`).

Nothing of the host is visible unless listed: the system roots and toolchains of
`kimicode.permissions.visibility` (read-only; `/etc` entries not readable by everyone are hidden), a
fresh `/dev` and `/proc`, a private `/tmp`, `/var/tmp` and home directory (empty tmpfs, with only the
visible toolchain paths and git configuration bound in), this session's spill directory (read-only),
and the workspace: read-only in the `read-only` profile, writable in `workspace-write`.

Git: in `workspace-write` the repository's history can be written (objects, refs, logs, the index) so
`git commit` works, but never what makes git run code or read other files later: `config`,
`config.worktree`, `hooks/`, `info/`, `modules/` (submodules' own configs and hooks), `worktrees/` and a
linked worktree's `commondir`/`gitdir` pointers stay read-only. A workspace that is a linked worktree
(a fork's `--fork --worktree` tree) gets its repository's history writable the same way; a workspace
inside a larger repository sees that repository read-only (it is the project; a repository holding the
home directory is not shown).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from typing import Final

from kimicode.permissions.runslater import RunsLater
from kimicode.permissions.visibility import SYSTEM_ROOTS, TOOLCHAIN_HOME_PATHS, hidden_in_etc
from kimicode.tools.sandbox_guard import GIT_ENTRIES, HOME_ENTRIES, WORKSPACE_ENTRIES, is_placeholder, protect

__all__ = ["GIT_PROTECTED", "file_system_args", "git_args", "placeholder_places", "runs_later_args"]

GIT_PROTECTED: Final = tuple(e.name for e in GIT_ENTRIES)
"""Inside a git directory: what makes git run code or read other files (`kimicode.permissions.runslater`);
read-only in every sandbox, whether or not it exists."""
_GITDIR_POINTER: Final = RunsLater("git", "gitdir", "a linked worktree's pointer back to its working tree")
_MADE_IF_MISSING: Final = ("hooks", "info")
"""Created (empty, as `git init` makes them) when missing: lasting folders, not placeholders."""


def contains(outer: str, inner: str) -> bool:
    """True when `inner` is `outer` or below it (both resolved)."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def file_system_args(
    ws: str,
    *,
    writable: bool,
    home: str,
    tmp_bytes: int,
    extra: Iterable[str] = (),
    spill: str | None = None,
    kimicode_home: str | None = None,
) -> list[str]:
    """bwrap arguments building the visible file system (see the module docstring); all paths resolved.
    The order is bwrap's: a later mount lies over an earlier one."""
    args, bound = _system_args()
    size = ["--size", str(tmp_bytes)] if tmp_bytes > 0 else []
    args += [*size, "--tmpfs", "/tmp", *size, "--tmpfs", "/var/tmp"]
    if not contains(ws, home) and not any(contains(b, home) for b in bound):  # the workspace may be inside it
        args += [*size, "--tmpfs", home, *_toolchain_args(home)]
    repo_top = _enclosing_repo(ws, home)
    if repo_top is not None:
        args += ["--ro-bind", repo_top, repo_top]
    args += ["--bind" if writable else "--ro-bind", ws, ws]
    args += git_args(repo_top or ws, writable=writable)
    if writable:
        args += runs_later_args(ws, home)
    if kimicode_home and contains(ws, kimicode_home) and os.path.isdir(kimicode_home) and kimicode_home != ws:
        args += ["--tmpfs", kimicode_home]  # every project's session logs and the config
    return args + _read_only_args(ws, extra, spill)


def _read_only_args(ws: str, extra: Iterable[str], spill: str | None) -> list[str]:
    """The extra read-only paths that exist outside the workspace, and the spill directory when there is one."""
    args = []
    for path in extra:
        if os.path.exists(path) and not contains(ws, path):
            args += ["--ro-bind", path, path]
    if spill is not None and os.path.isdir(spill):
        args += ["--ro-bind", spill, spill]
    return args


def _system_args() -> tuple[list[str], list[str]]:
    """The system's directories read-only (links kept as links), the hidden files of /etc, /dev and /proc; and
    the directories bound."""
    args: list[str] = []
    bound: list[str] = []
    for root in SYSTEM_ROOTS:
        if not os.path.lexists(root) or any(contains(b, root) for b in bound):
            continue
        if os.path.islink(root):
            args += ["--symlink", os.readlink(root), root]
        else:
            args += ["--ro-bind", root, root]
            bound.append(root)
    for hidden in hidden_in_etc():
        args += ["--tmpfs", hidden] if os.path.isdir(hidden) else ["--ro-bind", "/dev/null", hidden]
    args += ["--dev", "/dev", "--proc", "/proc"]
    return args, bound


def _toolchain_args(home: str) -> list[str]:
    """The toolchains under an emptied home, read-only."""
    args: list[str] = []
    for rel in TOOLCHAIN_HOME_PATHS:
        path = os.path.join(home, rel)
        if os.path.exists(path):
            args += ["--ro-bind", os.path.realpath(path), path]
    return args


def _enclosing_repo(ws: str, home: str) -> str | None:
    """The top of the git repository the workspace lies inside (not at its top), when that repository
    does not hold the home directory; None otherwise."""
    dot = os.path.join(ws, ".git")
    if os.path.lexists(dot) and not is_placeholder(dot, as_dir=True):
        return None
    parent = os.path.dirname(ws)
    while parent and parent != "/":
        if os.path.lexists(os.path.join(parent, ".git")):
            return None if contains(parent, home) else parent
        parent = os.path.dirname(parent)
    return None


def _gitfile_target(dot: str) -> str | None:
    """The directory a `.git` file points to (`gitdir: PATH`), resolved; None when it is not one."""
    try:
        with open(dot, encoding="utf-8", errors="replace") as fh:
            line = fh.readline(4096).strip()
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    target = line[len("gitdir:") :].strip()
    return os.path.realpath(os.path.join(os.path.dirname(dot), target))


def git_args(top: str, *, writable: bool) -> list[str]:
    """bwrap arguments for the repository at `top` (see the module docstring); `top`'s own tree is
    already bound (writable or not)."""
    dot = os.path.join(top, ".git")
    if os.path.isdir(dot) and not os.path.islink(dot):
        return _protect(os.path.realpath(dot)) if writable else []
    if os.path.islink(dot):
        real = os.path.realpath(dot)
        return ["--ro-bind", real, real] if os.path.isdir(real) else []
    if not os.path.isfile(dot):
        return []
    gitdir = _gitfile_target(dot)
    if gitdir is None or not os.path.isdir(gitdir):
        return []
    common = gitdir
    try:
        with open(os.path.join(gitdir, "commondir"), encoding="utf-8", errors="replace") as fh:
            common = os.path.realpath(os.path.join(gitdir, fh.readline(4096).strip()))
    except OSError:
        pass
    args = ["--ro-bind", dot, dot, "--ro-bind", common, common]  # the `.git` file itself: never re-pointed
    if gitdir != common and not contains(common, gitdir):
        args += ["--ro-bind", gitdir, gitdir]
    if not writable or gitdir == common or _worktree_config(common):
        return args  # a submodule's git directory (inside the parent's modules/) stays read-only
    for name in ("objects", "refs", "logs"):
        path = os.path.join(common, name)
        if os.path.isdir(path):
            args += ["--bind", path, path]
    kept = protect(gitdir, (*GIT_ENTRIES, _GITDIR_POINTER), gitdir)
    return [*args, "--bind", gitdir, gitdir, *kept] if kept is not None else args


def _worktree_config(common: str) -> bool:
    """True when the repository reads per-worktree config files (then a worktree's directory is kept
    read-only, as a missing config.worktree could otherwise be created)."""
    try:
        with open(os.path.join(common, "config"), encoding="utf-8", errors="replace") as fh:
            return "worktreeconfig" in fh.read(65536).lower()
    except OSError:
        return False


def _protect(gitdir: str) -> list[str]:
    """A git directory writable but GIT_PROTECTED read-only, absent ones as placeholders (the whole
    directory read-only when it has no `config`, or when a placeholder cannot be made)."""
    if not os.path.isfile(os.path.join(gitdir, "config")) or _worktree_config(gitdir):
        return ["--ro-bind", gitdir, gitdir]
    for name in _MADE_IF_MISSING:
        with contextlib.suppress(OSError):
            os.makedirs(os.path.join(gitdir, name), mode=0o755, exist_ok=True)
    kept = protect(gitdir, GIT_ENTRIES, gitdir)
    return ["--ro-bind", gitdir, gitdir] if kept is None else ["--bind", gitdir, gitdir, *kept]


def runs_later_args(ws: str, home: str) -> list[str]:
    """The workspace's own places that run later (`.kimicode`, `.claude`, `.mcp.json`, ...), read-only
    whether or not they exist; the home directory's too when the workspace holds it. The workspace read-only
    as a whole when a placeholder cannot be made."""
    args: list[str] = []
    for top, entries in placeholder_places(ws, home):
        if top.endswith("/.git") or "/.git/" in top:
            continue  # bound by git_args
        if top == ws and os.path.lexists(os.path.join(ws, ".git")):
            entries = tuple(e for e in entries if e.name != ".git")  # an existing one: bound by git_args
        kept = protect(top, entries, ws)
        if kept is None:
            return ["--ro-bind", ws, ws]
        args += kept
    return args


def placeholder_places(ws: str, home: str) -> list[tuple[str, tuple[RunsLater, ...]]]:
    """Where placeholders may be made for a workspace-write command in `ws` (for their removal)."""
    places: list[tuple[str, tuple[RunsLater, ...]]] = [(ws, WORKSPACE_ENTRIES)]
    if contains(ws, home):
        places.append((home, HOME_ENTRIES))
    dot = os.path.join(_enclosing_repo(ws, home) or ws, ".git")  # the repository git_args protects
    if os.path.isdir(dot) and not os.path.islink(dot):
        places.append((os.path.realpath(dot), GIT_ENTRIES))
    elif os.path.isfile(dot):
        gitdir = _gitfile_target(dot)
        if gitdir is not None:
            places.append((gitdir, GIT_ENTRIES))
    return places
