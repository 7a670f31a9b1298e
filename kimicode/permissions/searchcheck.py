"""What a recursive search reads (`grep -r`, `rg`, `git grep --no-index`, `diff -r`): whether a tree
holds a sensitive file, under any name (a suspicious name, a hard link, a link out of the tree)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from kimicode.permissions.policy import Policy

__all__ = ["sensitive_below"]

_SUSPECT_NAME = re.compile(
    r"(?i)^\.env|^\.envrc$|^id_|\.(pem|key|p12|pfx|jks|keystore|ppk)$|credential|netrc|npmrc|pypirc|pgpass"
    r"|my\.cnf$|htpasswd|yarnrc|^\.vault-token$|\.jsonl$"
)
_SEARCH_LIMIT = 5000


def sensitive_below(
    root: Path, policy: Policy, allowed: Callable[[Path], bool], shown: Callable[[Path], str]
) -> str | None:
    """A description of a sensitive file a recursive search of `root` would read, or None; a tree too
    large to check, or one that holds the home directory, counts as holding one."""
    home = Path(os.path.realpath(policy.user_home))
    if root == home or root in home.parents or root == Path("/"):
        return "your home directory's credential stores"
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", "node_modules", ".venv", "__pycache__")]
        seen += len(filenames) + len(dirnames)
        if seen > _SEARCH_LIMIT:
            return f"more than {_SEARCH_LIMIT} files (too many to check for secrets)"
        linked = _followed_link(dirpath, [*dirnames, *filenames], home, policy)
        if linked is not None:  # `grep -R`, `rg -L` follow links out of the tree
            return linked
        for fname in filenames:
            path = Path(dirpath) / fname
            if _SUSPECT_NAME.search(fname) or _linked(path):
                why = policy.sensitive(path)
                if why and not allowed(path):
                    return f"{shown(path)} ({why})"
    return None


def _followed_link(dirpath: str, names: Sequence[str], home: Path, policy: Policy) -> str | None:
    """A symbolic link among `names` that leads to a sensitive file or to (a parent of) the home directory."""
    for name in names:
        path = Path(dirpath) / name
        if not os.path.islink(path):
            continue
        target = Path(os.path.realpath(path))
        if target == home or target in home.parents or policy.sensitive(path) or policy.sensitive(target):
            return f"{path.name}, a link to {target}"
    return None


def _linked(path: Path) -> bool:
    """A regular file with more than one name (it may be a secret under another name)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_nlink > 1 and not os.path.islink(path)
