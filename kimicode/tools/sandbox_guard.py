"""The places that run later, read-only in the sandbox whether or not they exist (`kimicode.permissions.runslater`).

A read-only bind mount needs something to mount on, and in a writable directory the only way to stop a
name from being created is a mount point at that name. So for every place on the list that is absent,
kimicode makes an **empty read-only placeholder** before bwrap starts (an empty directory for a folder,
an empty file for a file; `commondir` holds `.`, which points git at the directory it is in, so git reads
it exactly as if it were absent) and bwrap binds each place, existing or placeholder, read-only over
itself. A command can then neither change nor create any of them. Placeholders are marked by their
mode (0500 for a directory, 0400 for a file) and emptiness, and are removed when the last sandboxed
command of any kimicode process on that workspace ends: every command holds a shared lock (in
KIMICODE_HOME, which no sandbox sees) from before its placeholders are made until it ends, and the one
that can turn it into an exclusive lock removes them. Only the workspace-write profile needs them (the
read-only profile binds the whole workspace read-only).

While a command runs, the placeholders are visible on the host too: an empty `.git/rebase-merge/`
makes `git status` say a rebase is in progress (commit, checkout and merge still work; a rebase cannot
start inside the sandbox, which is the point), and an empty `.mcp.json` is not valid JSON for another
program reading it at that moment.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from typing import Final

from kimicode.permissions.runslater import RUNS_LATER, RunsLater

__all__ = ["GIT_ENTRIES", "HOME_ENTRIES", "WORKSPACE_ENTRIES", "guarded", "is_placeholder", "protect", "release"]

GIT_ENTRIES: Final = tuple(e for e in RUNS_LATER if e.where == "git" and e.sandbox)
WORKSPACE_ENTRIES: Final = tuple(e for e in RUNS_LATER if e.where == "workspace" and e.sandbox)
HOME_ENTRIES: Final = tuple(e for e in RUNS_LATER if e.where == "home" and e.sandbox)

_DIR_MODE: Final = 0o500
_FILE_MODE: Final = 0o400
_CONTENT: Final = {"commondir": b"."}
"""A placeholder's content where an empty file would change what git does (an empty commondir is an error)."""


def _is_dir_entry(entry: RunsLater) -> bool:
    return entry.is_dir or entry.name == ".git"


def is_placeholder(path: str, as_dir: bool) -> bool:
    """True when `path` is a placeholder this module made (its mode and emptiness say so)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if as_dir:
        if not stat.S_ISDIR(st.st_mode) or stat.S_IMODE(st.st_mode) != _DIR_MODE:
            return False
        try:
            return not os.listdir(path)
        except OSError:
            return False
    if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != _FILE_MODE:
        return False
    want = _CONTENT.get(os.path.basename(path), b"")
    if st.st_size != len(want):
        return False
    try:
        with open(path, "rb") as fh:
            return fh.read(len(want) + 1) == want
    except OSError:
        return False


def _make(path: str, as_dir: bool) -> bool:
    """Make a placeholder at `path` (its parent exists); True when something is there now."""
    try:
        if as_dir:
            os.mkdir(path, _DIR_MODE)
            os.chmod(path, _DIR_MODE)  # whatever the umask: the mode is the mark
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, _CONTENT.get(os.path.basename(path), b""))
                os.fchmod(fd, _FILE_MODE)
            finally:
                os.close(fd)
    except FileExistsError:
        return True
    except OSError:
        return False
    return True


def _steps(top: str, entry: RunsLater) -> list[tuple[str, bool]]:
    """The paths from `top` down to the entry, each with whether its placeholder is a directory (all but
    the last; the last as the entry says)."""
    parts = entry.name.split("/")
    return [(os.path.join(top, *parts[: i + 1]), i < len(parts) - 1 or _is_dir_entry(entry)) for i in range(len(parts))]


def protect(top: str, entries: Iterable[RunsLater], inside: str) -> list[str] | None:
    """bwrap arguments keeping each of `entries` below `top` read-only; for an absent one a placeholder is
    made at its first missing component (`.config` for `.config/fish/` when there is no `.config`). None
    when one could be neither found nor made (the caller then keeps `top` read-only as a whole). `inside`
    is the writable tree: a place that resolves outside it is bound at its own name."""
    args: list[str] = []
    bound: set[str] = set()
    for entry in entries:
        steps = _steps(top, entry)
        for path, as_dir in steps:
            last = path == steps[-1][0]
            if os.path.lexists(path) and not last:
                if not os.path.isdir(path):
                    break  # a file where a folder would be: nothing can be created below it
                if not is_placeholder(path, as_dir=True):
                    continue  # a real folder on the way
            elif not os.path.lexists(path) and not _make(path, as_dir):
                return None
            if path not in bound:
                bound.add(path)
                real = os.path.realpath(path)
                if not os.path.exists(real):  # a dangling link: keep the name, whatever it points at
                    args += ["--ro-bind", "/dev/null", path]
                else:
                    args += ["--ro-bind", real, real if _within(real, inside) else path]
            break
    return args


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def release(places: Iterable[tuple[str, Iterable[RunsLater]]]) -> None:
    """Remove the placeholders below each `(top, entries)` (only what `is_placeholder` recognises), the
    deepest first, so that a folder made only to hold others' placeholders goes too."""
    candidates = {path: as_dir for top, entries in places for entry in entries for path, as_dir in _steps(top, entry)}
    for path in sorted(candidates, key=lambda p: p.count("/"), reverse=True):
        if is_placeholder(path, candidates[path]):
            with contextlib.suppress(OSError):
                os.rmdir(path) if candidates[path] else os.unlink(path)


def _lock_path(lock_dir: str, ws: str) -> str:
    os.makedirs(lock_dir, mode=0o700, exist_ok=True)
    key = hashlib.sha256(os.path.realpath(ws).encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return os.path.join(lock_dir, f"sandbox-{key}.lock")


@contextlib.contextmanager
def guarded(lock_dir: str, ws: str, places: Callable[[], Iterable[tuple[str, Iterable[RunsLater]]]]) -> Iterator[None]:
    """Hold the workspace's shared lock while a sandboxed command runs; at the end, when no other command
    holds it, remove the placeholders of `places()` (see the module doc)."""
    try:
        fd = os.open(_lock_path(lock_dir, ws), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        yield  # no lock: placeholders are left in place (safe, only untidy)
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return  # another command still runs: the last one out removes them
        release(places())
    finally:
        os.close(fd)
