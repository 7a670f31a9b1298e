"""The live processes of this machine, read once from /proc (Linux; empty elsewhere).

Shared by the bash tool (is a process group still alive?) and the exit clean-up (what still descends
from kimicode?). Zombies are left out: they hold no resources, and where PID 1 does not reap orphans
they may linger for ever.
"""

from __future__ import annotations

import os


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
