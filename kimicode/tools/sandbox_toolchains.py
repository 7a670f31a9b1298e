"""The user's toolchain shown in the sandbox, and the secrets below every shown place hidden again.

`toolchain_args` binds, read-only, the directories `kimicode.permissions.toolchains` finds from the
environment (the active virtualenv, `PATH`, conda, poetry, pipx, uv, pyenv, nvm and what their
interpreters need). `secret_masks` then covers, in every place shown below the home directory, the
credential stores of `kimicode.permissions.secretfiles` (`~/.config/git/credentials` inside the shown
`~/.config/git`) and every file directly in the place whose name is on that list (an `.env` or
`kubeconfig` in a `PATH` directory; `.docker/config.json` one level down): the sandbox and the
permission checks hide the same secrets. Deeper files (a package's test key in `site-packages`,
certifi's `cacert.pem`) stay shown: toolchains need them, and the file tools still ask before reading them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import PurePath
from typing import Final

from kimicode.permissions.secretfiles import (
    CREDENTIAL_HOME_PATHS,
    HOME_CREDENTIAL_DIRS,
    SECRET_PARENTS,
    secret_name_reason,
)
from kimicode.permissions.toolchains import environment_toolchains
from kimicode.permissions.visibility import SYSTEM_ROOTS, TOOLCHAIN_HOME_PATHS, history_reason
from kimicode.tools.sandbox_mounts import contains

__all__ = ["home_toolchain_mounts", "secret_masks", "toolchain_args", "toolchain_places"]

_SCAN_LIMIT: Final = 2000
"""Entries looked at per command at most (a huge directory does not slow every command)."""


def toolchain_places(ws: str, home: str, kimicode_home: str | None) -> list[str]:
    """The environment's toolchain directories (resolved) to bind: not inside or around the workspace,
    not already inside a system root."""
    places: list[str] = []
    for real in environment_toolchains(home, kimicode_home):
        if contains(ws, real) or contains(real, ws):
            continue
        if any(contains(root, real) for root in SYSTEM_ROOTS if not os.path.islink(root)):
            continue
        places.append(real)
    return places


def toolchain_args(places: Iterable[str]) -> list[str]:
    """bwrap arguments binding each place read-only at its own path."""
    return [a for place in places for a in ("--ro-bind", place, place)]


def secret_masks(home: str, shown: Sequence[str]) -> list[str]:
    """bwrap arguments hiding the secrets below the `shown` places that lie in the home directory (see
    the module docstring): a directory becomes an empty tmpfs, a file /dev/null."""
    mine = [p for p in shown if contains(home, p) and p != home]
    if not mine:
        return []
    hidden: list[str] = []
    for rel in (*HOME_CREDENTIAL_DIRS, *CREDENTIAL_HOME_PATHS):
        path = os.path.join(home, rel)
        if os.path.lexists(path) and not os.path.islink(path) and any(contains(p, path) for p in mine):
            hidden.append(path)
    budget = [_SCAN_LIMIT]
    for place in mine:
        _scan(place, hidden, budget)
    args: list[str] = []
    for path in dict.fromkeys(hidden):
        args += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
    return args


_SCANNED: dict[str, tuple[int, tuple[str, ...], tuple[str, ...]]] = {}
"""A directory's secrets and its subdirectories to look into, by its modification time: an entry added,
removed or renamed changes the directory's mtime, so an unchanged directory is not listed again for
every command (its subdirectories are checked against their own mtimes)."""


def _scan(directory: str, hidden: list[str], budget: list[int]) -> None:
    """Add to `hidden` the entries of `directory` named as secrets, and those of its subdirectories
    that hold secrets by name (`.docker/config.json`, `.kube/config`)."""
    try:
        mtime = os.stat(directory).st_mtime_ns
    except OSError:
        return
    cached = _SCANNED.get(directory)
    if cached is None or cached[0] != mtime:
        cached = _list(directory, mtime, budget)
        if cached is None:
            return
    hidden.extend(cached[1])
    for sub in cached[2]:
        _scan(sub, hidden, budget)


def _list(directory: str, mtime: int, budget: list[int]) -> tuple[int, tuple[str, ...], tuple[str, ...]] | None:
    """List `directory` once: its secret-named entries and its subdirectories named like `.docker`
    (cached unless the listing was cut short by the budget)."""
    found: list[str] = []
    below: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return None
    for entry in entries[: max(budget[0], 0)]:
        if entry.is_symlink():
            continue
        if secret_name_reason(PurePath(entry.path)) is not None or history_reason(entry.name) is not None:
            found.append(entry.path)
        elif entry.name.lower() in SECRET_PARENTS and entry.is_dir(follow_symlinks=False):
            below.append(entry.path)
    budget[0] -= len(entries)
    result = (mtime, tuple(found), tuple(below))
    if budget[0] >= 0:
        if len(_SCANNED) > 512:
            _SCANNED.clear()
        _SCANNED[directory] = result
    return result


def home_toolchain_mounts(home: str) -> list[str]:
    """The fixed toolchain paths below `home` that exist (where `sandbox_mounts` binds them)."""
    return [p for p in (os.path.join(home, rel) for rel in TOOLCHAIN_HOME_PATHS) if os.path.exists(p)]
