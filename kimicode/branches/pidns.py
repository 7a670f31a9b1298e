"""The branches' process tree in a PID namespace of its own: when the process goes, so does all it started.

`start()` runs in the branches' process (kimicode/branches/child.py) right after `userns.enter()`, while it
has one thread. It makes a PID namespace and forks twice, so that three processes remain:

- the *waiter*, the process the parent started (outside the namespace): it forwards SIGTERM and SIGINT,
  waits, and ends as the worker ended (the same exit code, or killed by the same signal);
- the namespace's *init* (its PID 1): it has PR_SET_PDEATHSIG=SIGKILL, so the waiter's death (a SIGKILL,
  the OOM killer) kills it; it forwards signals to the worker and reaps the orphans the branches' commands
  leave (`setsid … &`), so no zombie lingers; it ends when the worker does;
- the *worker* (PID 2), where `start()` returns: it does everything else, as the process did before.

When the init ends, for whatever reason, the kernel SIGKILLs every process of the namespace, nested ones
(bwrap's) included: nothing a branch started outlives the branches' process, sandbox or not. The init
mounts a procfs of the namespace on /proc (the mount namespace is the process's own), so the pids the
worker reads there (kimicode/procs.py: the bash tool's "is this process group alive?") are its own. The
worker is not PID 1 on purpose: PID 1 gets no signal it has no handler for, and reaping every orphan
with waitpid(-1) would steal its own children's statuses. Whatever step cannot be made (checked first
in a throwaway process: a container whose /proc is partly masked refuses a new procfs), `start()`
returns in this same process, without a PID namespace, saying why. Only stdlib here (see userns.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
FORWARDED = (signal.SIGTERM, signal.SIGINT)
_own_init: list[bool] = []
"""Set in the worker when its namespace has its init and a /proc of its own (`end_leftovers` acts then only)."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _error(step: str) -> str:
    return f"{step}: {os.strerror(ctypes.get_errno())}"


def _mount_proc(libc: ctypes.CDLL) -> str | None:
    """Mount this PID namespace's procfs on /proc (the caller is in it); None, or why not."""
    if libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
        return _error("cannot mount a /proc of its own")
    return None


def _probe(libc: ctypes.CDLL) -> str | None:
    """Try the namespace and its /proc in a throwaway child (one that failed cannot be undone here)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the probe: a PID and mount namespace of its own, and a process in it that mounts /proc
        os.close(read_end)
        if libc.unshare(CLONE_NEWPID | CLONE_NEWNS) != 0:
            _tell(write_end, _error("cannot create a PID namespace"))
        elif (inner := os.fork()) == 0:
            _tell(write_end, _mount_proc(libc))
        else:
            os.waitpid(inner, 0)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        why = fh.read().decode("utf-8", "replace")
    os.waitpid(pid, 0)
    return why or None


def _tell(fd: int, why: str | None) -> None:
    if why:
        with contextlib.suppress(OSError):
            os.write(fd, why.encode())


def start(close: Iterable[int] = ()) -> str | None:
    """Go on as the worker of a new PID namespace (see the module doc); or, when none can be made, in this
    same process. Returns None, or a notice saying what is missing. `close`: descriptors the waiter and
    the init must not keep (the protocol's own)."""
    if not sys.platform.startswith("linux"):
        return f"what a branch starts may outlive the branches' process: no PID namespace on {sys.platform}"
    libc = _libc()
    try:
        why = _probe(libc)
    except OSError as exc:  # no fork: no namespace either
        why = f"cannot try a PID namespace: {exc.strerror or exc}"
    if why is not None:
        return f"what a branch starts may outlive the branches' process: no PID namespace ({why})"
    defaults = {sig: signal.getsignal(sig) for sig in FORWARDED}
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)  # held until each process has its handlers
    if libc.unshare(CLONE_NEWPID) != 0:
        why = _error("cannot create a PID namespace")
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        return f"what a branch starts may outlive the branches' process: no PID namespace ({why})"
    lifeline, lifeline_end = os.pipe()  # the waiter holds the write end: EOF means it is gone
    status_in, status_out = os.pipe()  # the init writes the worker's wait status here
    init = os.fork()  # PID 1 of the new namespace: the first process forked into it
    if init != 0:
        os.close(lifeline)
        os.close(status_out)
        _wait_as_waiter(init, status_in, close)
    os.close(lifeline_end)
    os.close(status_in)
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if select.select([lifeline], [], [], 0)[0]:  # the waiter died before prctl: nobody would kill us
        os._exit(1)
    why = _mount_proc(libc)  # the probe could: unlikely to fail now; the namespace still holds then
    worker = os.fork()
    if worker != 0:
        _init(worker, status_out, close, libc)
    os.close(lifeline)
    os.close(status_out)
    for sig, handler in defaults.items():
        if handler is not None:  # None: set outside Python, and never changed here
            signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    if why is None:
        _own_init.append(True)
    return None if why is None else f"the branches' PID namespace has no /proc of its own ({why})"


def _adopted() -> list[int]:
    """The live processes whose parent is this namespace's init, the worker (this process) left out."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state, ppid = fh.read().rsplit(b")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if ppid == b"1" and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def end_leftovers(patience: float = 5.0) -> int:
    """SIGKILL what the branches' commands left running (`setsid … &`, double forks: the init adopted them),
    and what those leave in turn, until none is left or `patience` seconds have passed; the worker's own
    children (commands still running) are not touched. Called before a branch's verify command, so that
    no leftover of a sandbox-off command can change the workspace only while it runs. A no-op outside
    a PID namespace of the branches' own (the local engine, a fallback): PID 1 is someone else's there.
    Returns how many processes were signalled."""
    if not _own_init:
        return 0
    import time

    deadline, count = time.monotonic() + patience, 0
    while (found := _adopted()) and time.monotonic() < deadline:
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        count += len(found)
        time.sleep(0.01)  # the init reaps them; their children are adopted in turn
    return count


def _forward_to(pid: int) -> None:
    def forward(sig: int, _frame: Any) -> None:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)  # a signal held meanwhile is forwarded now


def _close(fds: Iterable[int]) -> None:
    for fd in (0, *fds):
        with contextlib.suppress(OSError):
            os.close(fd)


def _init(worker: int, status_out: int, close: Iterable[int], libc: ctypes.CDLL) -> NoReturn:
    """PID 1: forward signals to the worker, reap every process that ends here, and end with the worker
    (the kernel then kills what is left in the namespace)."""
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # the branches' commands see it: they must not read its memory
    _close(close)
    _forward_to(worker)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if pid == worker:
            break
    with contextlib.suppress(OSError):
        os.write(status_out, str(status).encode())
    os._exit(0)


def _wait_as_waiter(init: int, status_in: int, close: Iterable[int]) -> NoReturn:
    """The process the parent started: forward signals to the init, then end as the worker did."""
    _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    _close(close)
    _forward_to(init)
    _, status = os.waitpid(init, 0)
    with os.fdopen(status_in, "rb") as fh:
        reported = fh.read().decode("ascii", "replace")
    if reported.isdigit():  # the worker's status (the init is gone too: so is everything in the namespace)
        status = int(reported)
    _end_as(os.waitstatus_to_exitcode(status))


def _end_as(code: int) -> NoReturn:
    """Exit with `code`, or die of the signal `-code` (the parent reports "killed by signal N")."""
    sys.stdout.flush()
    sys.stderr.flush()
    if code < 0:
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
            os.kill(os.getpid(), -code)
        os._exit(128 - code)
    os._exit(code)
