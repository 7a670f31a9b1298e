"""Overlay mounts in a private user and mount namespace (Linux), by direct system calls.

A branch's workspace (kimicode/branches/overlay.py) is an overlayfs mount: the exploration's snapshot and
the live workspace below, the branch's own directory above (its changed files only). Mounting needs no
privilege inside a user namespace of one's own (Linux 5.11+, `userxattr`), and the mounts exist only in
that namespace's processes: the branches' process (kimicode/branches/child.py) and what it starts, all
in a PID namespace made right after `enter()` (kimicode/branches/pidns.py), so none outlives it.

The process maps its own uid and gid to themselves (not to root, as `unshare -r` would): the files keep
their owners, so a checkpoint index written outside matches the stat data seen inside, and the commands
the branches run (git, bash) run as the user, without capabilities. After mounting, `lock()` moves the
process into a second user namespace: its mounts are then locked (a branch cannot unmount its overlay to
write to what is underneath, even with the sandbox off). Only stdlib here: it runs before anything else
in the child, while the process has one thread (unshare(2) refuses a multithreaded process).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_REC = 0x4000
MS_PRIVATE = 0x40000


class NamespaceError(OSError):
    """The namespace or an overlay mount could not be made (the message says which step, and why)."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _fail(step: str) -> NamespaceError:
    err = ctypes.get_errno()
    return NamespaceError(err, f"{step}: {os.strerror(err)}")


def _map_self(uid: int, gid: int) -> None:
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as fh:
            fh.write(text)


def enter() -> None:
    """Move this (single-threaded) process into a new user and mount namespace, as itself, with mount
    events kept private to it."""
    uid, gid = os.getuid(), os.getgid()
    libc = _libc()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        raise _fail("cannot create a user namespace")
    try:
        _map_self(uid, gid)
    except OSError as exc:
        raise NamespaceError(exc.errno or 1, f"cannot map the user into the namespace: {exc.strerror}") from None
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise _fail("cannot make the mounts private")


def lock() -> None:
    """Lock the mounts made so far: a nested user namespace cannot unmount them (see the module doc)."""
    uid, gid = os.getuid(), os.getgid()
    if _libc().unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        raise _fail("cannot lock the mounts")
    _map_self(uid, gid)


def escape(path: str) -> str:
    """A path as an overlay mount option takes it (`,` `:` `\\` escaped)."""
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def mount_overlay(target: str, lowers: Sequence[str], upper: str, work: str) -> None:
    """Mount an overlay at `target`: `lowers` read-only (the first on top), writes go to `upper`."""
    options = (
        f"userxattr,lowerdir={':'.join(escape(p) for p in lowers)},upperdir={escape(upper)},workdir={escape(work)}"
    )
    if _libc().mount(b"overlay", os.fsencode(target), b"overlay", 0, os.fsencode(options)) != 0:
        raise _fail(f"cannot mount the overlay at {target}")


def probe(scratch: str) -> None:
    """Try it all once in this (throwaway, single-threaded) process: raises NamespaceError saying why not."""
    dirs = {name: os.path.join(scratch, name) for name in ("lower", "upper", "work", "merged")}
    for d in dirs.values():
        os.makedirs(d, mode=0o700, exist_ok=True)
    with open(os.path.join(dirs["lower"], "f"), "w", encoding="ascii") as fh:
        fh.write("lower\n")
    enter()
    mount_overlay(dirs["merged"], [dirs["lower"]], dirs["upper"], dirs["work"])
    with open(os.path.join(dirs["merged"], "f"), "w", encoding="ascii") as fh:
        fh.write("upper\n")
    lock()
    with open(os.path.join(dirs["upper"], "f"), encoding="ascii") as fh:
        if fh.read() != "upper\n":
            raise NamespaceError(0, "the overlay did not write to its upper directory")
