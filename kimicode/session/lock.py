"""One writer per session: an advisory lock beside each session log.

Two processes appending to one log would interleave two conversations into one history. The process
that writes a session holds a POSIX record lock (`lockf`, `F_SETLK`) on `<id>.lock` next to
`<id>.jsonl` until it closes the log; a second process resuming the same session is refused with a
message saying who holds it and that `--fork` continues a copy. The kernel drops the lock when its
holder dies, so a lock left by a killed process is simply taken over: there is nothing stale to clean
up by hand. The lock is per process (a library opening one session twice in one process is its own
business as far as the kernel goes: the lock records which sessions this process holds, so a second
agent of the same process opening a held session is refused the same way).

Between turns an agent holds no descriptor (a service with hundreds of idle agents would run out): it
`suspend`s the lock, which closes the file (dropping the kernel's lock) and leaves its process id (and pid
namespace) in it. Another process of that namespace that then takes the kernel lock finds a live process
named in the file and is refused the same way; the holder `resume`s at its next write. A dead process's id,
or one of another namespace (a sandboxed branch's), is taken over; the session log then sees at its next
write that someone else wrote it meanwhile and stops (session/log.py).
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from kimicode.errors import SessionError
from kimicode.safeio import private_dirs

__all__ = ["SessionBusyError", "SessionLock"]

try:
    import fcntl
except ImportError:  # Windows: no advisory locks here; sessions are not locked
    fcntl = None  # type: ignore[assignment]


_held: set[str] = set()
"""The lock files this process holds (real paths)."""
_held_lock = threading.Lock()


class SessionBusyError(SessionError):
    """The session is being written by another process, or by another agent of this one. `holder`: that
    process's id when known (the command line names `kimicode attach` when it is the running server)."""

    def __init__(self, message: str, *, session_id: str = "", holder: int | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.holder = holder


class SessionLock:
    """The held lock of one session; `release()` (or process exit) frees it."""

    def __init__(self, path: Path, fd: int | None, key: str | None = None) -> None:
        self.path = path
        self._fd = fd
        self._key = key
        """The real path recorded in this process's set of held locks."""
        self.suspended = False
        """Between turns: the descriptor is closed, the file still names this process (`resume` takes it back)."""

    @classmethod
    def acquire(cls, directory: Path, session_id: str) -> SessionLock:
        """Take the lock of `session_id` in `directory`; raise SessionBusyError if another holder has it.

        OSError (an unwritable directory) propagates: the caller reports it as a home-directory problem.
        """
        path = directory / f"{session_id}.lock"
        if fcntl is None:
            return cls(path, None)
        private_dirs(directory)
        key = os.path.realpath(path)
        with _held_lock:  # a POSIX lock is per process: a second agent here would get it again
            if key in _held:
                raise _busy_here(session_id)
            _held.add(key)
        try:
            return cls._take(path, key, session_id)
        except BaseException:
            with _held_lock:
                _held.discard(key)
            raise

    @classmethod
    def in_process(cls, key: str, session_id: str) -> SessionLock:
        """The lock of a session kept elsewhere than in a file (a caller's `SessionStore`), named by `key`:
        only agents of this process are kept apart (the store does it across processes)."""
        with _held_lock:
            if key in _held:
                raise _busy_here(session_id)
            _held.add(key)
        return cls(Path(key), None, key)

    @classmethod
    def _take(cls, path: Path, key: str, session_id: str) -> SessionLock:
        assert fcntl is not None
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (BlockingIOError, PermissionError):  # EAGAIN or EACCES: held by another process
            holder = _read_holder(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another kimicode process"
            raise SessionBusyError(
                f"session {session_id} is in use by {who}: two writers would mix their conversations. "
                f"Wait for it to finish, or continue a copy with --fork (Agent.resume(..., fork=True))",
                session_id=session_id,
                holder=holder,
            ) from None
        except OSError:
            os.close(fd)
            raise
        holder = _idle_holder(fd)
        if holder is not None:  # a live process of this pid namespace between its turns
            os.close(fd)
            raise SessionBusyError(
                f"session {session_id} is in use by process {holder}: two writers would mix their conversations. "
                f"Wait for it to finish, or continue a copy with --fork (Agent.resume(..., fork=True))",
                session_id=session_id,
                holder=holder,  # the CLI names `kimicode serve` when it is the holder
            )
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd, key)

    def suspend(self) -> None:
        """Close the descriptor (between turns), keeping the session this process's (see the module's notes)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self.suspended = True
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()} idle {_namespace()}\n".encode(), 0)
            with contextlib.suppress(OSError):
                os.close(fd)

    def resume(self, session_id: str) -> None:
        """Take the kernel lock back for a write; SessionBusyError when another process took the session."""
        if not self.suspended:
            return
        self._fd = self._take(self.path, self._key or "", session_id)._detach()
        self.suspended = False

    def _detach(self) -> int | None:
        fd, self._fd, self._key = self._fd, None, None  # the new holder object gives its descriptor away
        return fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Free the lock (idempotent); the file no longer names this process."""
        if self.suspended and fcntl is not None:  # take it back to clear our id (unless someone took it over)
            self.suspended = False
            with contextlib.suppress(OSError, SessionError):
                self._fd = self._take(self.path, self._key or "", "")._detach()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the descriptor drops the lock
        if self._key is not None:
            with _held_lock:
                _held.discard(self._key)
            self._key = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the module may be half torn down
            self.release()  # an agent dropped without aclose() must not keep its session locked


def _busy_here(session_id: str) -> SessionBusyError:
    return SessionBusyError(
        f"session {session_id} is in use by another agent in this process: two writers would mix "
        "their conversations. Close the other one (aclose()), or continue a copy with "
        "Agent.resume(..., fork=True)"
    )


def _namespace() -> str:
    """This process's pid namespace (a pid means nothing in another one: a sandboxed branch's process)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "-"


def _idle_holder(fd: int) -> int | None:
    """The process the lock file names as holding the session between its turns, when it is another live
    process of this pid namespace; else None (free, ours, stale, or not ours to judge)."""
    try:
        words = os.pread(fd, 64, 0).decode("ascii", "replace").split()
    except OSError:
        return None
    if len(words) != 3 or words[1] != "idle" or not words[0].isdigit() or words[2] != _namespace():
        return None
    pid = int(words[0])
    return pid if pid != os.getpid() and _alive(pid) else None


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (a lock file naming a dead process is stale)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def _read_holder(fd: int) -> int | None:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").split()
    except OSError:
        return None
    return int(text[0]) if text and text[0].isdigit() else None
