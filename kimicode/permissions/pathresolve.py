"""The one path resolver behind every permission check on a file: redirect targets, file-tool
arguments and the files a glob names.

`resolve(raw, base)` turns what the model wrote into the file the operating system would open:
`~` expanded, relative paths taken from `base`, `..` and symbolic links followed (`os.path.realpath`).
Paths that are aliases of something only the running process knows cannot be resolved here: a
`/dev/fd/N/...` or `/proc/<pid>/fd/...` path means "whatever descriptor N is in the process that opens
it", and `/proc/<pid>/root`, `/proc/<pid>/cwd` re-enter the file system from another process's view.
Such a path is returned unresolved with `Resolved.problem` set, and the permission engine treats it
as needing approval (see `policy.sensitive_reason`). Exactly `/dev/null`, `/dev/stdin`, `/dev/stdout`,
`/dev/stderr`, `/dev/tty`, `/dev/fd/0`, `/dev/fd/1` and `/dev/fd/2` are harmless special devices.

`expand_glob` lists what a glob would match (as bash would, hidden files only for patterns that
start with a dot), so `cat .e*` is checked as `cat .env`.

`hard_link_twin` finds, for a regular file with more than one name, a sensitive other name of the
same inode (so a hard link to `.env` called `notes.txt` is as sensitive as `.env`).
"""

from __future__ import annotations

import errno
import glob as _glob
import os
import re
import stat
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kimicode.permissions.subjects import Place, ToolLike

__all__ = [
    "HARMLESS_DEVICES",
    "PathChanged",
    "Resolved",
    "approved_paths",
    "call_paths",
    "expand_glob",
    "hard_link_twin",
    "invalid_path_reason",
    "is_harmless_device",
    "open_dir_nofollow",
    "resolve",
]

HARMLESS_DEVICES = frozenset(
    {"/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/0", "/dev/fd/1", "/dev/fd/2"}
)
"""Written exactly like this, these name the terminal, the command's own streams or nothing."""

_PROC_ALIAS = re.compile(
    r"/proc/(?:self|thread-self|[0-9]+)(?:/task/[0-9]+)?/(?:fd|fdinfo|root|cwd|map_files|exe)(?:/|$)"
)
_FD_ALIAS = re.compile(r"/dev/fd(?:/|$)|/dev/std(?:in|out|err)/")
MAX_GLOB_RESULTS = 2000
MAX_COMPONENTS = 4096
"""A longer path cannot be opened (PATH_MAX); it is not resolved, and counts as needing approval."""
MAX_LINK_SCAN = 200_000


@dataclass(frozen=True)
class Resolved:
    """A resolved path; `problem` says why it could not be resolved (then `path` is as written)."""

    path: Path
    problem: str | None = None
    device: bool = False
    """True for one of the `HARMLESS_DEVICES`, written exactly."""
    invalid: bool = False
    """True when no file can have this name (a NUL byte, or text the file system cannot encode):
    `path` is then a printable stand-in, and tools refuse the call with `problem`."""


def invalid_path_reason(raw: str) -> str | None:
    """Why `raw` cannot name a file at all (a NUL byte; characters the file system encoding cannot
    represent, such as a lone surrogate), or None."""
    if "\x00" in raw:
        return f"the path {_printable(raw)} contains a NUL byte, which no file name can hold"
    try:
        os.fsencode(raw)
    except UnicodeError:
        return f"the path {_printable(raw)} holds characters the file system cannot represent"
    return None


def _printable(raw: str) -> str:
    return repr(raw.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")[:200])


def is_harmless_device(text: str) -> bool:
    """True for exactly one of `HARMLESS_DEVICES` (`/dev/fd/1/../x` is not)."""
    return text in HARMLESS_DEVICES


def _lexical(path: str) -> str:
    """`path` with `.` and `..` removed without following links (only to spot aliases by name)."""
    return os.path.normpath(path)


def _home(raw: str, home: Path | str | None) -> str:
    """`raw` with a leading `~` expanded (to `home` when given)."""
    if home is not None and (raw == "~" or raw.startswith("~/")):
        return str(home) + raw[1:]
    return os.path.expanduser(raw)


def resolve(raw: str, base: Path | str, home: Path | str | None = None) -> Resolved:
    """The file `raw` names, seen from directory `base` (see the module doc)."""
    invalid = invalid_path_reason(raw)
    if invalid is not None:
        return Resolved(Path(os.path.join(str(base), _printable(raw)[1:-1])), invalid, invalid=True)
    text = _home(raw, home)
    if not os.path.isabs(text):
        text = os.path.join(str(base), text)
    if is_harmless_device(text):
        return Resolved(Path(text), device=True)
    # An alias is judged on the text as written (its `..` cannot be undone lexically: /dev/fd/3/..
    # is the parent of whatever fd 3 is) and after removing `..` (/tmp/../dev/fd/3/x).
    for candidate in (text, _lexical(text)):
        probe = candidate.rstrip("/") + "/"
        if _FD_ALIAS.match(probe) or _PROC_ALIAS.match(probe):
            return Resolved(
                Path(candidate),
                f"{raw} goes through a process's file descriptors or root, which cannot be resolved here",
            )
    if text.count("/") > MAX_COMPONENTS:
        return Resolved(Path(text), f"{raw[:80]}... has more than {MAX_COMPONENTS} components")
    real, via = _follow(text)
    if via is not None:
        return Resolved(Path(via), f"{raw} leads through {via}, which cannot be resolved here")
    return Resolved(Path(real))


def _is_alias(path: str) -> bool:
    probe = path.rstrip("/") + "/"
    return bool(_FD_ALIAS.match(probe) or _PROC_ALIAS.match(probe))


def _follow(path: str) -> tuple[str, str | None]:
    """`os.path.realpath(path)`, done link by link so that a link leading into `/proc/self/fd` or
    `/dev/fd` is seen (realpath would follow it through kimicode's own descriptors); returns the
    resolved path and the alias passed through (None when none was)."""
    parts = deque(p for p in path.split("/") if p)
    done = "/"
    hops = 0
    while parts:
        part = parts.popleft()
        if part == ".":
            continue
        if part == "..":
            done = os.path.dirname(done)
            continue
        candidate = os.path.join(done, part)
        if _is_alias(candidate) and not (not parts and is_harmless_device(candidate)):
            return candidate, candidate
        try:
            target = os.readlink(candidate)
        except OSError:  # not a link, or missing: keep the name
            done = candidate
            continue
        hops += 1
        if hops > 40:
            return os.path.realpath(path), None  # a loop: the OS refuses it too
        parts.extendleft(reversed([p for p in target.split("/") if p]))
        if target.startswith("/"):
            done = "/"
    return done, None


def expand_glob(pattern: str, base: Path | str, home: Path | str | None = None) -> list[Path] | None:
    """The existing files `pattern` matches (bash's rules: `*`, `?`, `[...]`; a leading dot only
    matched explicitly), resolved; None when there are more than MAX_GLOB_RESULTS (check as unknown)."""
    pattern = _home(pattern, home)
    if not os.path.isabs(pattern):
        pattern = os.path.join(str(base), pattern)
    out: list[Path] = []
    for hit in _glob.iglob(pattern, recursive=False):
        out.append(resolve(hit, base).path)
        if len(out) > MAX_GLOB_RESULTS:
            return None
    return out


_PRUNE = frozenset({"node_modules", ".venv", "venv", "__pycache__", ".git", ".tox", ".mypy_cache", "target"})
_INODE_CACHE: dict[tuple[str, ...], tuple[float, dict[tuple[int, int], tuple[Path, str]] | None]] = {}
INODE_CACHE_SECONDS = 10.0


def _sensitive_inodes(
    roots: Iterable[Path], is_sensitive: Callable[[Path], str | None], limit: int
) -> dict[tuple[int, int], tuple[Path, str]] | None:
    """(device, inode) -> (path, reason) for the files below `roots` that are sensitive by name (only
    those are stat'ed); None when more than `limit` names were seen. Cached for a few seconds per set
    of roots, since every read of a hard-linked file (pnpm's node_modules are full of them) asks it."""
    roots = list(roots)
    key = (*(str(r) for r in roots), f"limit={limit}")
    now = time.monotonic()
    cached = _INODE_CACHE.get(key)
    if cached is not None and now - cached[0] < INODE_CACHE_SECONDS:
        return cached[1]
    found: dict[tuple[int, int], tuple[Path, str]] | None = {}
    seen = 0
    for root in roots:
        if found is None or not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = [d for d in dirnames if d not in _PRUNE]
            seen += len(filenames) + len(dirnames)
            if seen > limit:
                found = None
                break
            for name in filenames:
                other = Path(dirpath) / name
                why = is_sensitive(other)
                if not why:
                    continue
                try:
                    st = os.stat(other, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    found[(st.st_dev, st.st_ino)] = (other, why)
    if len(_INODE_CACHE) > 64:
        _INODE_CACHE.clear()
    _INODE_CACHE[key] = (now, found)
    return found


def hard_link_twin(
    path: Path, roots: Iterable[Path], is_sensitive: Callable[[Path], str | None], limit: int = MAX_LINK_SCAN
) -> str | None:
    """Why `path` is sensitive through another name of the same inode under `roots`, or None.

    Only regular files with more than one link are looked at. When `roots` hold more than `limit`
    names the answer is "maybe": a reason is returned, so the caller asks (never a false "safe")."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
        return None
    inodes = _sensitive_inodes(roots, is_sensitive, limit)
    if inodes is None:
        return f"{path.name} has {st.st_nlink} hard links and the workspace is too large to check them"
    twin = inodes.get((st.st_dev, st.st_ino))
    if twin is not None and twin[0] != path:
        return f"it is a hard link to {twin[0]} ({twin[1]})"
    return None


def call_paths(tool: ToolLike, args: Mapping[str, Any], ctx: Place) -> list[Path]:
    """The resolved paths a file tool works on (a read tool without one works on the workspace)."""
    raw: list[str] = []
    for key in ("path", "file_path"):
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            raw.append(value)
    many = args.get("paths")
    if isinstance(many, list):
        raw.extend(v for v in many if isinstance(v, str) and v.strip())
    if tool.paths is not None:  # apply_patch: every file the patch touches
        raw.extend(p for p in tool.paths(args) if p.strip())
    if not raw and tool.kind == "read":
        raw.append(".")
    return [ctx.resolve(p) for p in raw]


def approved_paths(tool: ToolLike, args: Mapping[str, Any], ctx: Place) -> list[Path]:
    """The resolved files a file tool's call touches, as the permission engine sees them (empty for
    other tools). The agent takes them before asking and again after the yes: if they differ (a
    symbolic link was swapped in while the prompt was open), the call is refused."""
    if tool.kind not in ("edit", "read"):
        return []
    return call_paths(tool, args, ctx)


class PathChanged(OSError):
    """A component of a resolved path is (now) a symbolic link: the file approved is not this one."""


def open_dir_nofollow(directory: Path) -> int:
    """A descriptor of the resolved `directory`, opened one component at a time with O_NOFOLLOW, so
    that a link swapped in for any component after the path was resolved (and approved) is refused
    instead of followed. Raises PathChanged for a link, OSError otherwise."""
    if not directory.is_absolute():
        raise PathChanged(f"{directory} is not a resolved path")
    flags = os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open("/", flags)
    try:
        for part in directory.parts[1:]:
            try:
                nxt = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP or _is_link_at(part, fd):
                    raise PathChanged(f"{part} in {directory} is a symbolic link now") from None
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link_at(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
