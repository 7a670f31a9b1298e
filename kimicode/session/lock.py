"""One writer per session: an advisory lock beside each session log.

Two processes appending to one log would interleave two conversations into one history. The process
that writes a session holds a POSIX record lock (`lockf`, `F_SETLK`) on `<id>.lock` next to
`<id>.jsonl` until it closes the log; a second process resuming the same session is refused with a
message saying who holds it and that `--fork` continues a copy. The kernel drops the lock when its
holder dies, so a lock left by a killed process is simply taken over: there is nothing stale to clean
up by hand. The lock is per process (a library opening one session twice in one process is its own
business, as with any file).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["SessionBusyError", "SessionLock"]

try:
    import fcntl
except ImportError:  # Windows: no advisory locks here; sessions are not locked
    fcntl = None  # type: ignore[assignment]


class SessionBusyError(ValueError):
    """The session is being written by another process."""


class SessionLock:
    """The held lock of one session; `release()` (or process exit) frees it."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def acquire(cls, directory: Path, session_id: str) -> SessionLock:
        """Take the lock of `session_id` in `directory`; raise SessionBusyError if another holder has it.

        OSError (an unwritable directory) propagates: the caller reports it as a home-directory problem.
        """
        path = directory / f"{session_id}.lock"
        if fcntl is None:
            return cls(path, None)
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (BlockingIOError, PermissionError):  # EAGAIN or EACCES: held by another process
            holder = _read_holder(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another kimicode process"
            raise SessionBusyError(
                f"session {session_id} is in use by {who}: two writers would mix their conversations. "
                f"Wait for it to finish, or continue a copy with --fork (Agent.resume(..., fork=True))"
            ) from None
        except OSError:
            os.close(fd)
            raise
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Free the lock (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the descriptor drops the lock


def _read_holder(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
