"""The user's own toolchain, found from the environment: visible (read-only) like the fixed toolchain paths.

A command admitted by a rule runs in the sandbox, which shows only the places of
`kimicode.permissions.visibility`. Without this, an activated virtualenv in `~/.venvs`, a conda or poetry
environment or a directory the user put on `PATH` would not exist inside it, and `pytest` would be
"command not found" while the same command approved at the prompt works. So these are visible too:

- the active environments: `$VIRTUAL_ENV`, `$CONDA_PREFIX` (and conda's own installation, from
  `$CONDA_EXE`), `$PYENV_ROOT`, `$NVM_DIR`, `$WORKON_HOME`, `$POETRY_VIRTUALENVS_PATH`, `$UV_TOOL_DIR`,
  `$UV_PYTHON_INSTALL_DIR`, `$PIPX_HOME`, and where virtualenvwrapper, poetry, pipx, pipenv, uv's tools
  and conda keep environments in the home directory (`TOOLCHAIN_ENV_HOME_PATHS`);
- every absolute directory on `$PATH`;
- what those need to run: the base interpreter of each virtualenv (`home =` in its `pyvenv.cfg`, and
  where its `python` link points), and where the programs in a `PATH` directory of the home directory
  link to (`~/.local/bin/tool` -> `~/.local/share/pipx/venvs/tool/bin/tool`: that environment).

Never shown, whatever the environment says: the home directory itself or anything holding it, `/`,
`/tmp`, `/var/tmp`, anything in `/run`, `/proc`, `/dev`, `/sys`, KIMICODE_HOME, and the credential stores of
`kimicode.permissions.secretfiles`. Secrets below a shown place stay hidden in the sandbox.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import PurePath
from typing import Final

from kimicode.permissions.secretfiles import secret_name_reason

__all__ = ["ENV_VARIABLES", "TOOLCHAIN_ENV_HOME_PATHS", "environment_toolchains"]

ENV_VARIABLES: Final = (
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PYENV_ROOT",
    "NVM_DIR",
    "WORKON_HOME",
    "POETRY_VIRTUALENVS_PATH",
    "UV_TOOL_DIR",
    "UV_PYTHON_INSTALL_DIR",
    "PIPX_HOME",
)
"""Variables naming an environment's directory (shown whole)."""

TOOLCHAIN_ENV_HOME_PATHS: Final = (
    ".virtualenvs",
    ".cache/pypoetry/virtualenvs",
    ".local/share/pypoetry",
    ".local/share/pipx",
    ".local/share/uv/tools",
    ".local/share/virtualenvs",
    "miniconda3",
    "anaconda3",
    "miniforge3",
    "mambaforge",
    "micromamba",
    ".conda/envs",
    ".local/share/mamba",
)
"""Below the home directory: where virtualenvwrapper, poetry, pipx, uv's tools, pipenv and conda keep
their environments (pyenv's and nvm's are in `visibility.TOOLCHAIN_HOME_PATHS`)."""

_NEVER: Final = ("/tmp", "/var/tmp", "/run", "/var/run", "/proc", "/dev", "/sys")
"""Never shown whole, nor anything holding them (a directory below /tmp on PATH is shown)."""
_NEVER_BELOW: Final = ("/run", "/var/run", "/proc", "/dev", "/sys")
"""Nothing below these is shown (sockets, kernel interfaces)."""
_VENV_DEPTH: Final = 3
_VENV_LIMIT: Final = 2000
"""How deep and how many directories below a shown place are searched for virtualenvs (whose base
interpreter may lie elsewhere): `PYENV_ROOT/versions/3.12/envs/x` is three levels down."""
_MAX_LINKS: Final = 400
"""Entries looked at per PATH directory of the home directory (for where their links point)."""


def environment_toolchains(
    home: str, kimicode_home: str | None = None, env: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The resolved directories of the user's toolchain named by `env` (default: this process's
    environment), filtered as the module docstring says."""
    env = os.environ if env is None else env
    key = tuple(env.get(name, "") for name in (*ENV_VARIABLES, "PATH", "CONDA_EXE"))
    return _found(os.path.realpath(home), os.path.realpath(kimicode_home) if kimicode_home else "", key)


@lru_cache(maxsize=16)
def _found(home: str, kc_home: str, key: tuple[str, ...]) -> tuple[str, ...]:
    values = dict(zip((*ENV_VARIABLES, "PATH", "CONDA_EXE"), key, strict=True))
    wanted = [values[name] for name in ENV_VARIABLES if values[name]]
    if values["CONDA_EXE"]:
        wanted.append(os.path.dirname(os.path.dirname(values["CONDA_EXE"])))
    path_dirs = [d for d in values["PATH"].split(os.pathsep) if d]
    wanted += path_dirs
    wanted += [os.path.join(home, rel) for rel in TOOLCHAIN_ENV_HOME_PATHS]
    shown: list[str] = []
    for text in wanted:
        _add(text, home, kc_home, shown)
    for text in path_dirs:
        real = os.path.realpath(text)
        if _within(real, home):
            for target in _link_targets(real):
                _add(target, home, kc_home, shown, files=True)
    for place in list(shown):
        for venv in _venvs_in(place):
            for base in _venv_bases(venv):
                _add(base, home, kc_home, shown)
    return tuple(shown)


def _venvs_in(place: str) -> list[str]:
    """The virtualenvs at `place` and up to _VENV_DEPTH levels below it (`versions/3.12/envs/x`), at
    most _VENV_LIMIT directories looked at; system directories are not searched."""
    if any(_within(place, root) for root in ("/usr", "/bin", "/sbin", "/lib", "/etc", "/nix", "/snap")):
        return []
    found: list[str] = []
    level = [place]
    budget = _VENV_LIMIT
    for _depth in range(_VENV_DEPTH + 1):
        below: list[str] = []
        for directory in level:
            if os.path.isfile(os.path.join(directory, "pyvenv.cfg")):
                found.append(directory)
                continue
            try:
                entries = [e.path for e in os.scandir(directory) if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            budget -= len(entries)
            if budget < 0:
                return found
            below += entries
        level = below
    return found


def _add(text: str, home: str, kc_home: str, shown: list[str], *, files: bool = False) -> None:
    """Append the resolved `text` to `shown` when it exists (a directory, or with `files` a file too),
    is allowed and is not there yet."""
    if not os.path.isabs(text):
        return
    real = os.path.realpath(text)
    exists = os.path.isdir(real) or (files and os.path.isfile(real))
    if not exists or real in shown or not _allowed(real, home, kc_home):
        return
    shown.append(real)


def _allowed(real: str, home: str, kc_home: str) -> bool:
    """Whether a directory may be shown: not a place that holds the home directory, private state or
    credentials (see the module docstring)."""
    from kimicode.permissions.secretfiles import CREDENTIAL_HOME_PATHS, HOME_CREDENTIAL_DIRS

    if (
        real == "/"
        or _within(home, real)
        or any(_within(d, real) for d in _NEVER)
        or any(_within(real, d) for d in _NEVER_BELOW)
    ):
        return False
    if kc_home and (_within(real, kc_home) or _within(kc_home, real)):
        return False
    if _within(real, home):
        for rel in (*HOME_CREDENTIAL_DIRS, *CREDENTIAL_HOME_PATHS):
            place = os.path.join(home, rel)
            if _within(real, place) or _within(place, real):
                return False
    return True


def _link_targets(directory: str) -> list[str]:
    """Where the symbolic links in a PATH directory point: the environment holding each target (the
    directory above `bin/` when it is a virtualenv), a `bin/` directory, else the target file alone
    (a link to `~/Documents/x.sh` shows that file, not the folder)."""
    found: list[str] = []
    try:
        entries = list(os.scandir(directory))[:_MAX_LINKS]
    except OSError:
        return found
    for entry in entries:
        if not entry.is_symlink():
            continue
        target = os.path.realpath(entry.path)
        if secret_name_reason(PurePath(target)) is not None:
            continue  # a link to a secret is not a program to show
        parent = os.path.dirname(target)
        top = os.path.dirname(parent)
        if os.path.isfile(os.path.join(top, "pyvenv.cfg")):
            place = top
        else:
            place = parent if os.path.basename(parent) in ("bin", "sbin") else target
        if place not in found:
            found.append(place)
    return found


def _venv_bases(directory: str) -> list[str]:
    """For a virtualenv: the installation its interpreter comes from (`home =` of `pyvenv.cfg`, and
    where `bin/python` points), as the prefix above `bin/`."""
    cfg = os.path.join(directory, "pyvenv.cfg")
    bases: list[str] = []
    try:
        with open(cfg, encoding="utf-8", errors="replace") as fh:
            for line in fh.read(8192).splitlines():
                key, _, value = line.partition("=")
                if key.strip().lower() == "home" and value.strip():
                    bases.append(os.path.dirname(os.path.realpath(value.strip())))
    except OSError:
        return bases
    for name in ("python", "python3"):
        exe = os.path.join(directory, "bin", name)
        if os.path.islink(exe):
            bases.append(os.path.dirname(os.path.dirname(os.path.realpath(exe))))
    return bases


def _within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")
