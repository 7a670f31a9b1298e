"""Resource limits for sandboxed commands: processes, memory, file size and CPU time per command.

Two mechanisms, both used when present:

- **cgroups** (`Cgroups`): when kimicode may create cgroups below its own (cgroup v1 `pids` and
  `memory` controllers, or a delegated cgroup v2 directory with them enabled), each command gets its own
  cgroup with `pids.max` and a memory limit, entered before the command starts, killed and removed
  after. This is the only limit on processes that binds root (the kernel exempts root from
  RLIMIT_NPROC).
- **setrlimit** (`rlimit_prefix`): every sandboxed command starts through `ulimit` (bash's setrlimit),
  setting soft and hard limits together so the command cannot raise them: RLIMIT_NPROC (counted per
  user namespace, so per sandbox), RLIMIT_DATA (heap and private mappings; unlike RLIMIT_AS it does not
  break runtimes that reserve large address ranges), RLIMIT_FSIZE and RLIMIT_CPU.

The sandbox's private `/tmp` and home are tmpfs of at most `file_size_mb` each, so filling them costs
memory the limit bounds. Configure with `[sandbox] max_processes`, `max_memory_mb`, `max_file_size_mb`,
`max_cpu_seconds` (docs/permissions.md).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import resource
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kimicode.config.choices import (
    DEFAULT_SANDBOX_MAX_CPU_SECONDS,
    DEFAULT_SANDBOX_MAX_FILE_SIZE_MB,
    DEFAULT_SANDBOX_MAX_MEMORY_MB,
    DEFAULT_SANDBOX_MAX_PROCESSES,
)

__all__ = ["DEFAULT_LIMITS", "CgroupSlot", "Cgroups", "Limits", "limits_from_settings", "rlimit_prefix"]


@dataclass(frozen=True)
class Limits:
    """Per-command limits (0 or less: that limit is not set)."""

    processes: int = DEFAULT_SANDBOX_MAX_PROCESSES
    memory_mb: int = DEFAULT_SANDBOX_MAX_MEMORY_MB
    file_size_mb: int = DEFAULT_SANDBOX_MAX_FILE_SIZE_MB
    cpu_seconds: int = DEFAULT_SANDBOX_MAX_CPU_SECONDS


DEFAULT_LIMITS: Final = Limits()
SETTING_KEYS: Final = {
    "max_processes": "processes",
    "max_memory_mb": "memory_mb",
    "max_file_size_mb": "file_size_mb",
    "max_cpu_seconds": "cpu_seconds",
}
"""`[sandbox]` keys and the `Limits` field each sets."""


def limits_from_settings(table: Mapping[str, Any] | None) -> Limits:
    """The limits a `[sandbox]` table sets (missing keys: the defaults)."""
    values: dict[str, int] = {}
    for key, attr in SETTING_KEYS.items():
        value = (table or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            values[attr] = value
    return Limits(**values)


def _capped(kind: int, wanted: int) -> int:
    """`wanted`, but never above the current hard limit (raising it would fail, and must not happen)."""
    hard = resource.getrlimit(kind)[1]
    return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)


def rlimit_prefix(limits: Limits) -> list[str]:
    """An argv prefix that sets the limits (soft and hard) and then execs the rest of the argv."""
    parts: list[str] = []
    for flag, kind, value in (
        ("-u", resource.RLIMIT_NPROC, limits.processes),
        ("-d", resource.RLIMIT_DATA, limits.memory_mb * 1024),  # KiB
        ("-f", resource.RLIMIT_FSIZE, limits.file_size_mb * 1024),  # KiB (bash outside posix mode)
    ):
        if value > 0:
            scale = 1024 if flag in ("-d", "-f") else 1
            parts += [flag, str(_capped(kind, value * scale) // scale)]
    steps = [f"ulimit {' '.join(parts)}"] if parts else []
    if limits.cpu_seconds > 0:  # the soft limit first (SIGXCPU says why), the hard one a second later
        cpu = _capped(resource.RLIMIT_CPU, limits.cpu_seconds + 1)
        steps += [f"ulimit -S -t {max(1, cpu - 1)}", f"ulimit -H -t {cpu}"]
    if not steps:
        return []
    script = f'{" && ".join(steps)} || exit 125; exec "$@"'
    return ["/bin/bash", "-c", script, "kimicode-limits"]


# -- cgroups ---------------------------------------------------------------------------------------


def _own_cgroups() -> dict[str, str]:
    """controller (or "" for cgroup v2) -> this process's cgroup path, from /proc/self/cgroup."""
    found: dict[str, str] = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return found
    for line in text.splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        for name in controllers.split(",") if controllers else [""]:
            found[name] = path
    return found


def _writable_dir(path: Path) -> bool:
    if not path.is_dir() or not os.access(path, os.W_OK):
        return False
    probe = path / f"kimicode-probe-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


class Cgroups:
    """The cgroup directories below which kimicode may make one cgroup per command (found once)."""

    _counter = itertools.count()

    def __init__(self, root: Path = Path("/sys/fs/cgroup")) -> None:
        self.parents: dict[str, tuple[Path, int]] = {}
        """controller -> (directory to create cgroups in, cgroup version)."""
        own = _own_cgroups()
        v2 = own.get("")
        if v2 is not None and (root / "cgroup.controllers").is_file():
            base = root / v2.lstrip("/")
            enabled = _read(base / "cgroup.subtree_control").split()
            if _writable_dir(base):
                for name in ("pids", "memory"):
                    if name in enabled:
                        self.parents[name] = (base, 2)
        for name in ("pids", "memory"):
            if name in self.parents or name not in own:
                continue
            base = root / name / own[name].lstrip("/")
            if (base / "cgroup.procs").is_file() and _writable_dir(base):
                self.parents[name] = (base, 1)

    def __bool__(self) -> bool:
        return bool(self.parents)

    def slot(self, limits: Limits) -> CgroupSlot:
        """A fresh cgroup per controller with the limits written; `prefix` moves the command into them.
        `release()` (blocking: run it in a thread) kills whatever is left in them and removes them."""
        made: list[Path] = []
        # random too: a pid is unique only in its PID namespace (the branches' process has its own)
        name = f"kimicode-{os.getpid()}-{next(self._counter)}-{os.urandom(4).hex()}"
        for controller, (base, version) in self.parents.items():
            path = base / name
            try:
                path.mkdir()
            except OSError:
                continue
            made.append(path)
            _write_limit(path, controller, version, limits)
        return CgroupSlot(made)


@dataclass
class CgroupSlot:
    """The cgroups of one command."""

    dirs: list[Path]

    @property
    def prefix(self) -> list[str]:
        return _enter_prefix([str(p / "cgroup.procs") for p in self.dirs]) if self.dirs else []

    def release(self) -> None:
        for path in self.dirs:
            _remove(path)
        self.dirs = []


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write_limit(path: Path, controller: str, version: int, limits: Limits) -> None:
    with contextlib.suppress(OSError):
        if controller == "pids" and limits.processes > 0:
            (path / "pids.max").write_text(str(limits.processes))
        elif controller == "memory" and limits.memory_mb > 0:
            name = "memory.max" if version == 2 else "memory.limit_in_bytes"
            (path / name).write_text(str(limits.memory_mb * 1024 * 1024))


def _enter_prefix(procs_files: Sequence[str]) -> list[str]:
    """sh moves itself into each cgroup (so everything it starts is counted) and execs the command."""
    moves = " && ".join(f'echo $$ > "${i + 1}"' for i in range(len(procs_files)))
    script = f'{moves} || exit 125; shift {len(procs_files)}; exec "$@"'
    return ["/bin/sh", "-c", script, "kimicode-cgroup", *procs_files]


def _remove(path: Path) -> None:
    """Kill what is left in the cgroup and remove it (a few tries: killed processes take a moment)."""
    for _ in range(50):
        pids = [int(p) for p in _read(path / "cgroup.procs").split() if p.isdigit()]
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)
