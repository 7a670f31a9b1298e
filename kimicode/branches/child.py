"""The branches' process: mounts each branch's overlay in its own namespace and runs every branch there.

Started once per exploration by `kimicode.branches.overlay_engine.OverlayEngine` (not once per branch: a
Python start costs more than a branch's creation). It enters a user and mount namespace first, while it
has one thread, then a PID namespace (kimicode/branches/pidns.py): the process the parent started stays
outside as a waiter and the rest runs in a forked worker, so that nothing a branch starts outlives the
process, by construction. The worker imports the agent (the parent's Agent class, `module:qualname`, is
its argument) while the parent forks the branches, then reads its orders (a pickle from the parent on
stdin, length-prefixed): the mounts, the job and the session's options. It mounts the overlays, locks them
(kimicode/branches/userns.py), then takes the branches one by one as the parent forks them (`{"branch":
...}`, then `{"end": true}`) and runs them all on one event loop as the local engine does (one rate
limiter, one HTTP pool, the parent's prompt cache key), each resumed from its session log with its
workspace at the mounted path, each started as soon as it arrives. It writes JSON lines to its stdout,
nothing else: `{"branch": {...}}` at every state change, `{"step": n, "id": ...}` when a branch starts a
model request, `{"notice": "..."}` when it runs without a PID namespace (and why), `{"fatal": "..."}`
when it cannot start. Its stdin closing (the parent gone) or SIGTERM/SIGINT (the waiter forwards them)
interrupts the branches, which are saved as such (exit 130).
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any


def _emit(out: IO[str], message: dict[str, Any]) -> None:
    import json

    out.write(json.dumps(message) + "\n")  # ASCII: a file name that is not UTF-8 (a lone surrogate) travels too
    out.flush()


def _read_exactly(fd: int, n: int) -> bytes:
    """`n` bytes from `fd`, unbuffered (what follows is read by the event loop)."""
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise EOFError("the parent closed the pipe")
        data += chunk
    return data


def read_message(fd: int) -> Any:
    """One length-prefixed pickle from the parent process (our own bytes, over a private pipe)."""
    import pickle

    size = int.from_bytes(_read_exactly(fd, 8), "big")
    return pickle.loads(_read_exactly(fd, size))


def main() -> int:
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")  # the protocol's own descriptor; print() goes to stderr
    os.dup2(2, 1)
    from kimicode.branches import userns

    try:
        userns.enter()
    except OSError as exc:
        _emit(out, {"fatal": f"cannot make the branches' namespace: {exc.strerror or exc}"})
        return 3
    from kimicode.branches import pidns

    try:
        notice = pidns.start(close=(out.fileno(),))  # from here on: the worker of a PID namespace of its own
    except OSError as exc:
        _emit(out, {"fatal": f"cannot start the branches' PID namespace: {exc.strerror or exc}"})
        return 3
    if notice is not None:
        _emit(out, {"notice": notice})
    import importlib

    for name in ("kimicode.branches.child_run", "kimicode.llm.client", sys.argv[1].partition(":")[0]):
        importlib.import_module(name)  # now, while the parent forks the branches

    try:
        orders = read_message(sys.stdin.fileno())
    except (EOFError, OSError, ValueError) as exc:
        _emit(out, {"fatal": f"cannot read the orders: {exc}"})
        return 3
    failed: dict[str, str] = {}
    for bid, spec in orders["mounts"].items():
        try:
            userns.mount_overlay(spec["target"], spec["lowers"], spec["upper"], spec["work"])
        except OSError as exc:
            failed[bid] = f"could not mount the branch's workspace: {exc.strerror or exc}"
    try:
        userns.lock()
    except OSError as exc:
        _emit(out, {"fatal": f"cannot lock the branches' mounts: {exc.strerror or exc}"})
        return 3
    import asyncio

    from kimicode.branches.child_run import run_all

    code = asyncio.run(run_all(sys.argv[1], orders, failed, lambda message: _emit(out, message)))
    out.flush()
    sys.stderr.flush()
    os._exit(code)  # the branches are saved and closed: no interpreter teardown to wait for


if __name__ == "__main__":
    sys.exit(main())
