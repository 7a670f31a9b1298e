"""Reading files that someone else may have planted: never block on a FIFO, device or socket.

`open()` on a FIFO waits for a writer for ever and reading a device (`/dev/zero`, a terminal) never
ends, so a repository (or a model) that puts one where kimicode reads a file (`.gitignore`, `.npmrc`,
a tokenizer path, a file tool's argument) could hang the process. `read_regular` opens without blocking
(`O_NONBLOCK`, `O_NOCTTY`), checks that the opened file is a regular file, and only then reads.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["NotRegularFileError", "kind_of", "read_regular"]


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
