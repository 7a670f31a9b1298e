"""kimicode's own process: its children, and what they may see of it (Linux; no-ops elsewhere).

- `live_processes()`: the live processes of this machine, read once from /proc. Shared by the bash tool
  (is a process group still alive?) and the exit clean-up (what still descends from kimicode?). Zombies
  are left out: they hold no resources, and where PID 1 does not reap orphans they may linger for ever.
- `harden_process()`: the process makes itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`), so a command
  the model runs cannot read kimicode's environment (the API key) under `/proc/<ppid>/environ` or attach
  to it with ptrace, and (for the CLI) becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`) so that
  `setsid … &` grandchildren of the bash tool are re-parented to kimicode, not to init, and can be found
  and killed when the session ends (`reap_children`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Iterable
from typing import Final

_PR_SET_DUMPABLE: Final = 4
_PR_GET_DUMPABLE: Final = 3
_PR_SET_CHILD_SUBREAPER: Final = 36

_hardened: dict[str, bool] = {}


def live_processes() -> dict[int, tuple[int, int]]:
    """`{pid: (parent pid, process group)}` of every process that is not a zombie; {} without /proc."""
    if not os.path.isdir("/proc/self"):
        return {}
    table: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # after the command name, which may hold spaces
        if len(fields) > 2 and fields[0] not in (b"Z", b"X"):
            table[int(entry)] = (int(fields[1]), int(fields[2]))
    return table


def _libc() -> ctypes.CDLL:
    """The C library: the symbols already loaded into this process (the interpreter links libc), else
    the library by name. `ctypes.util.find_library` is the last resort: it runs `ldconfig -p` in a
    child process, which every start of kimicode would pay."""
    process = ctypes.CDLL(None, use_errno=True)
    if hasattr(process, "prctl"):
        return process
    from ctypes.util import find_library

    return ctypes.CDLL(find_library("c") or "libc.so.6", use_errno=True)


def _prctl(option: int, arg: int) -> int | None:
    """prctl(2) through libc; None where it cannot be called (not Linux, no libc)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = _libc()
        result: int = libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    except (OSError, AttributeError):
        return None
    return result


def harden_process(*, subreaper: bool = False) -> dict[str, bool]:
    """Make this process non-dumpable and, with `subreaper` (the CLI, which owns its whole process), a
    child subreaper (Linux; a no-op elsewhere). Idempotent.

    The library `Agent` does not set the subreaper flag: orphans re-parented to an application's
    process would be that application's to reap. Returns what took effect.
    """
    if "dumpable_off" not in _hardened:
        _hardened["dumpable_off"] = _prctl(_PR_SET_DUMPABLE, 0) == 0
    if subreaper and not _hardened.get("subreaper"):
        _hardened["subreaper"] = _prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0
    return dict(_hardened)


def is_dumpable() -> bool | None:
    """Whether this process is dumpable (None where it cannot be asked)."""
    result = _prctl(_PR_GET_DUMPABLE, 0)
    return None if result is None or result < 0 else bool(result)


def reap_children(grace: float = 0.5) -> int:
    """Kill every process still descending from this one (bash-tool leftovers such as `setsid x &`),
    and reap them. Returns how many were signalled. Linux only (reads /proc); elsewhere 0.

    Processes re-parented here thanks to the subreaper flag are found too. Called at exit.
    """
    import time

    me = os.getpid()
    victims = _descendants(me)
    if not victims:
        return 0
    for pid in victims:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _descendants(me):
        _reap(victims)
        time.sleep(0.02)
    for pid in _descendants(me):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    _reap(victims)
    return len(victims)


def _reap(pids: Iterable[int]) -> None:
    """Collect the exit status of those of `pids` that are (now) our children; never waitpid(-1),
    which would steal statuses other code waits for."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


SPARED: set[int] = set()
"""Children left running when kimicode exits, with their own descendants (`spare`)."""


def spare(pid: int) -> None:
    """Let the child `pid` (and what it starts) outlive this process: `reap_children` passes over it. For
    work of kimicode's own that must finish after a `-p` run ends (compacting a checkpoint store)."""
    SPARED.add(pid)


def _descendants(root: int) -> list[int]:
    """Live (non-zombie) descendants of `root`, from /proc, without the spared children's trees."""
    parent = {pid: ppid for pid, (ppid, _) in live_processes().items()}
    out: list[int] = []
    frontier = {root}
    while frontier:
        nxt = {pid for pid, pp in parent.items() if pp in frontier and pid not in out and pid not in SPARED}
        out.extend(sorted(nxt))
        frontier = nxt
    return out
