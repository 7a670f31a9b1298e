"""The user's toolchain shown in the sandbox, and the secrets below every shown place hidden again.

`toolchain_args` binds, read-only, the directories `kimicode.permissions.toolchains` finds from the
environment (the active virtualenv, `PATH`, conda, poetry, pipx, uv, pyenv, nvm and what their
interpreters need). `secret_masks` then covers, in every place shown below the home directory, the
credential stores of `kimicode.permissions.secretfiles` (`~/.config/git/credentials` inside the shown
`~/.config/git`) and every file whose name is on that list in the top levels of the place (an `.env`
or `kubeconfig` in a `PATH` directory): the sandbox and the permission checks hide the same secrets.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import PurePath
from typing import Final

from kimicode.permissions.secretfiles import CREDENTIAL_HOME_PATHS, HOME_CREDENTIAL_DIRS, secret_name_reason
from kimicode.permissions.toolchains import environment_toolchains
from kimicode.permissions.visibility import SYSTEM_ROOTS, TOOLCHAIN_HOME_PATHS
from kimicode.tools.sandbox_mounts import contains

__all__ = ["home_toolchain_mounts", "secret_masks", "toolchain_args", "toolchain_places"]

_SCAN_DEPTH: Final = 2
"""Levels below a shown place searched for secret file names (a venv's `lib/pythonX/site-packages`
is deeper: packages' own test keys and CA bundles such as certifi's `cacert.pem` stay usable)."""
_SCAN_LIMIT: Final = 5000
"""Entries looked at per command at most (a huge cache directory does not slow every command)."""


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
        _scan(place, 0, hidden, budget)
    args: list[str] = []
    for path in dict.fromkeys(hidden):
        args += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
    return args


def _scan(directory: str, depth: int, hidden: list[str], budget: list[int]) -> None:
    """Add to `hidden` the entries of `directory` (down to _SCAN_DEPTH) named as secrets."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        budget[0] -= 1
        if budget[0] < 0:
            return
        if entry.is_symlink():
            continue
        if secret_name_reason(PurePath(entry.path)) is not None:
            hidden.append(entry.path)
        elif depth + 1 < _SCAN_DEPTH and entry.is_dir(follow_symlinks=False):
            _scan(entry.path, depth + 1, hidden, budget)


def home_toolchain_mounts(home: str) -> list[str]:
    """The fixed toolchain paths below `home` that exist (where `sandbox_mounts` binds them)."""
    return [p for p in (os.path.join(home, rel) for rel in TOOLCHAIN_HOME_PATHS) if os.path.exists(p)]
