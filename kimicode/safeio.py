"""Reading files that someone else may have planted: never block on a FIFO, device or socket.

`open()` on a FIFO waits for a writer for ever and reading a device (`/dev/zero`, a terminal) never
ends, so a repository (or a model) that puts one where kimicode reads a file (`.gitignore`, `.npmrc`,
a tokenizer path, a file tool's argument) could hang the process. `read_regular` opens without blocking
(`O_NONBLOCK`, `O_NOCTTY`), checks that the opened file is a regular file, and only then reads.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import Any

__all__ = [
    "NotRegularFileError",
    "kind_of",
    "private_dirs",
    "private_open",
    "private_write",
    "read_regular",
    "read_small_text",
]

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


class NotRegularFileError(OSError):
    """The path is a FIFO, device, socket or directory: refused without reading."""


def kind_of(mode: int) -> str:
    """`a FIFO`, `a character device`, ... for a st_mode (for messages)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_regular(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """The bytes of the regular file at `path` (at most `limit` when given).

    Raises NotRegularFileError (an OSError, so callers' `except OSError` handle it) for anything else,
    at once, and OSError as `open` would for a missing or unreadable file.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(errno.EINVAL, f"{kind_of(mode)}, not a regular file", str(Path(path)))
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read() if limit is None else fh.read(limit)
    finally:
        os.close(fd)


def read_small_text(path: str | os.PathLike[str], limit: int) -> str | None:
    """The text of the regular file at `path` (undecodable bytes replaced), or None when it is missing,
    unreadable, not a regular file (never blocking on a FIFO) or larger than `limit` bytes."""
    try:
        if os.stat(path).st_size > limit:
            return None
        return read_regular(path, limit).decode("utf-8", errors="replace")
    except OSError:
        return None


def private_dirs(path: str | os.PathLike[str], top: str | os.PathLike[str] | None = None) -> Path:
    """`mkdir -p path` with every directory it creates mode 0700; with `top` (an ancestor, e.g.
    KIMICODE_HOME), the existing directories from `top` down to `path` are made 0700 too (older
    versions left them 0755). Directories owned by someone else are left alone. Returns `path`."""
    target = Path(path)
    missing: list[Path] = []
    current = target
    while not current.exists() and current.parent != current:
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=PRIVATE_DIR)
    if top is not None and (target == Path(top) or Path(top) in target.parents):
        current = target
        while True:
            _tighten(current, PRIVATE_DIR)
            if current == Path(top):
                break
            current = current.parent
    return target


def _tighten(path: Path, mode: int) -> None:
    """chmod `path` to `mode` when it is ours and looser (never follows a link)."""
    try:
        st = os.lstat(path)
        if st.st_uid == os.getuid() and not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) & ~mode:
            os.chmod(path, stat.S_IMODE(st.st_mode) & mode)
    except OSError:
        pass


def private_open(path: str | os.PathLike[str], mode: str = "a", *, encoding: str | None = "utf-8") -> Any:
    """`open(path, mode)` for a file only its owner may read: created 0600, an existing one tightened."""
    flags = {"a": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC}[mode[0]]
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE)
    try:
        st = os.fstat(fd)
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & ~PRIVATE_FILE:
            os.fchmod(fd, PRIVATE_FILE)
    except OSError:
        pass
    if "b" in mode:
        return os.fdopen(fd, mode)
    return os.fdopen(fd, mode, encoding=encoding)


def private_write(path: str | os.PathLike[str], data: bytes | bytearray | str) -> None:
    """Write `data` to `path` as a private file (0600)."""
    with private_open(path, "w" if isinstance(data, str) else "wb") as fh:
        fh.write(data)
