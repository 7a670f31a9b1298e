"""What kimicode may see outside the workspace without asking: one allowlist, used twice.

The permission engine reads a file outside the workspace without asking only when it lies below one of
`visible_roots` (system directories, toolchains, the user's git configuration; never the home directory
as a whole); anything else asks. The OS sandbox (`kimicode.tools.sandbox`) shows a command exactly the
same places, read-only, and nothing else of the machine: a command the permission parser misjudged
cannot read what the engine would have asked about.

Inside those places and inside the workspace, files that hold credentials still ask by name
(`HISTORY_NAMES` here, and the one list of `kimicode.permissions.secretfiles`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kimicode.permissions.secretfiles import CREDENTIAL_HOME_PATHS, HOME_CREDENTIAL_DIRS

__all__ = [
    "CREDENTIAL_HOME_PATHS",
    "HISTORY_NAMES",
    "HOME_CREDENTIAL_DIRS",
    "SYSTEM_ROOTS",
    "TOOLCHAIN_HOME_PATHS",
    "Places",
    "hidden_in_etc",
    "history_reason",
    "is_visible",
    "outside_reason",
    "visible_roots",
    "within_text",
]

SYSTEM_ROOTS: Final = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix",
    "/snap",
    "/usr/local",
)
"""System directories: programs, libraries, their configuration. `/etc` entries that are not readable
by everyone (`/etc/shadow`, host keys) are hidden inside the sandbox and ask outside it."""

TOOLCHAIN_HOME_PATHS: Final = (
    ".gitconfig",
    ".config/git",
    ".gitignore_global",
    ".local/bin",
    ".local/lib",
    ".local/share/uv/python",
    ".local/share/pnpm",
    ".pyenv",
    ".rbenv",
    ".nvm",
    ".volta",
    ".bun",
    ".deno",
    ".sdkman",
    ".asdf",
    ".nodenv",
    ".goenv",
    ".rustup",
    ".cargo/bin",
    ".cargo/registry",
    ".cargo/git",
    "go/pkg/mod",
    ".m2/repository",
    ".gradle/caches",
    ".gradle/wrapper",
    ".cache/pip",
    ".cache/uv",
    ".cache/go-build",
    ".npm/_cacache",
)
"""Below the user's home directory: git's configuration and the toolchains and package caches that
builds and tests read. Nothing else of the home directory is visible."""

HISTORY_NAMES: Final = frozenset(
    {
        ".bash_history",
        ".zsh_history",
        ".zhistory",
        ".sh_history",
        ".history",
        ".python_history",
        ".node_repl_history",
        ".psql_history",
        ".mysql_history",
        ".sqlite_history",
        ".rediscli_history",
        ".lesshst",
        ".viminfo",
        ".irb_history",
        ".pry_history",
        ".Rhistory",
        ".scala_history",
        ".wget-hsts",
        "fish_history",
    }
)
"""Shell and REPL histories: commands typed with passwords and tokens in them. Sensitive wherever they are."""


def history_reason(name: str) -> str | None:
    """Why a file called `name` is sensitive as a history file, or None."""
    if name in HISTORY_NAMES or (name.startswith(".") and name.endswith("_history")):
        return f"{name} is a command history (typed passwords and tokens end up there)"
    return None


def visible_roots(user_home: Path, extra: Iterable[Path] = (), kimicode_home: Path | None = None) -> list[Path]:
    """Every existing place outside the workspace that is visible (resolved, deduplicated, sorted):
    the system roots, the toolchain paths below `user_home`, the user's toolchain named by the
    environment (`kimicode.permissions.toolchains`: the active virtualenv, PATH, ...), and `extra` (the
    literal directories of the user's `read(...)` allow rules, and the session's own directory)."""
    from kimicode.permissions.toolchains import environment_toolchains

    found: set[Path] = set()
    home = os.path.realpath(user_home)
    candidates = [
        *SYSTEM_ROOTS,
        *(os.path.join(home, rel) for rel in TOOLCHAIN_HOME_PATHS),
        *map(str, extra),
        *environment_toolchains(home, str(kimicode_home) if kimicode_home is not None else None),
    ]
    for text in candidates:
        if os.path.lexists(text):
            found.add(Path(os.path.realpath(text)))
    return sorted(found)


def is_visible(path: Path, roots: Iterable[Path]) -> bool:
    """True when the resolved `path` is one of `roots` or below one."""
    return any(_within(path, root) for root in roots)


def hidden_in_etc() -> list[str]:
    """Entries below /etc that are not readable by everyone (`/etc/shadow`, ssh host keys, sudoers):
    hidden inside the sandbox and asked about outside it. Computed once per process."""
    global _HIDDEN_ETC
    if _HIDDEN_ETC is None:
        hidden: list[str] = []
        for dirpath, dirnames, filenames in os.walk("/etc"):
            for name in [*dirnames, *filenames]:
                full = os.path.join(dirpath, name)
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                if not os.path.islink(full) and not st.st_mode & 0o004:
                    hidden.append(full)
            dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in hidden]
            if len(hidden) > 2000:
                break
        _HIDDEN_ETC = hidden
    return list(_HIDDEN_ETC)


_HIDDEN_ETC: list[str] | None = None
_HIDDEN_ETC_PREFIXES: tuple[tuple[str, str], ...] | None = None


def _hidden_etc_prefixes() -> tuple[tuple[str, str], ...]:
    """`hidden_in_etc()` as (path, path + "/") pairs, built once (the list is copied on every call)."""
    global _HIDDEN_ETC_PREFIXES
    if _HIDDEN_ETC_PREFIXES is None:
        _HIDDEN_ETC_PREFIXES = tuple((str(Path(h)), str(Path(h)).rstrip("/") + "/") for h in hidden_in_etc())
    return _HIDDEN_ETC_PREFIXES


def _within(path: Path, root: Path) -> bool:
    inner, outer = str(path), str(root)
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def within_text(inner: str, outer: str) -> bool:
    """`inner` is `outer` or below it (both resolved paths as text)."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


@dataclass(frozen=True)
class Places:
    """The resolved (realpath) text of the fixed directories every sensitivity check compares with.

    Resolving them is most of the cost of a check, and they depend only on the directories themselves:
    a `Policy` resolves them once (`Policy.places`); `sensitive_reason` without one resolves them per call."""

    home: str
    kimicode_home: str
    workspace: str | None
    session_dir: str | None

    @classmethod
    def resolve(
        cls, user_home: Path, kimicode_home: Path, workspace: Path | None = None, session_dir: Path | None = None
    ) -> Places:
        """Resolve the four directories now."""
        real = os.path.realpath
        return cls(
            real(user_home),
            real(kimicode_home),
            None if workspace is None else real(workspace),
            None if session_dir is None else real(session_dir),
        )


def outside_reason(
    path: Path, workspace: Path, visible: Sequence[Path], kimicode_home: Path, places: Places | None = None
) -> str | None:
    """Why a path outside the workspace and the visible list asks (see kimicode.permissions.visibility).
    `places`, when given, holds `workspace` and `kimicode_home` already resolved."""
    text = str(path)
    ws = places.workspace if places is not None and places.workspace is not None else os.path.realpath(workspace)
    if within_text(text, ws):
        return None
    if is_visible(path, visible):
        if within_text(text, "/etc") and any(text == h or text.startswith(p) for h, p in _hidden_etc_prefixes()):
            return "it is a system file not readable by everyone"
        return None
    kc = places.kimicode_home if places is not None else os.path.realpath(kimicode_home)
    if within_text(text, os.path.join(kc, "sessions")):
        return None  # this project's own session logs (another project's were refused above)
    if not os.path.lexists(path):
        return None  # nothing there to read (a URL's `//host` part, a file a build will make)
    return (
        "it is outside the workspace and not on the list of places read without asking "
        '(docs/permissions.md, "What is visible"; a read(...) allow rule adds a place)'
    )
