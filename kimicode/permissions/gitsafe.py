"""Git without the programs a repository can name: how read-only git runs, and where repositories are.

A repository's configuration names programs git runs on its own: the external diff, textconv
filters, the pager, the fsmonitor, hooks. Two promises keep them from running without asking:

- **Read-only git runs with them switched off on its command line.** `read_only_git_env(line)` gives
  the environment the bash tool adds for a line the read-only allowance admits (every command in it
  read-only): an exported bash function `git` that runs `command git --no-pager -c core.fsmonitor=false
  -c core.hooksPath=/dev/null -c safe.bareRepository=explicit ...` and adds `--no-ext-diff
  --no-textconv` to the diff family (`--no-textconv` to blame and grep). Command-line configuration
  has the highest precedence, and a later option wins, so a read-only line cannot turn them back on
  (`--ext-diff` and `--textconv` are risky options in the specification and ask).
- **Another repository is a boundary.** `foreign_repository(directory, workspace)` finds a directory
  git would take for a repository other than the workspace's own: one holding `.git`, or a bare one
  (`HEAD`, `objects/`, `refs/`), between the directory a command runs in and the workspace root.
  `cd DIR && git ...` then asks, as `git -C DIR` does: that repository's own configuration (which
  the model may have written as ordinary files) would apply.
"""

from __future__ import annotations

import os
from pathlib import Path

from kimicode.permissions.programs import read_only
from kimicode.permissions.shellparse import ShellParseError, parse

__all__ = ["GIT_FUNCTION", "SAFE_CONFIG", "foreign_repository", "read_only_git_env"]

SAFE_CONFIG = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "safe.bareRepository=explicit",
    "core.pager=cat",
    "log.showSignature=false",
)
"""Configuration every read-only git command gets on its command line."""

_NO_EXT_DIFF = ("diff", "diff-tree", "diff-files", "diff-index", "log", "show", "whatchanged")
_NO_TEXTCONV_ONLY = ("blame", "annotate", "grep")

GIT_FUNCTION = (
    '() { local -a pre=(); while (($#)) && [[ $1 == -* ]]; do pre+=("$1"); shift; done; '
    f'case ${{1-}} in {"|".join(_NO_EXT_DIFF)}) set -- "$1" --no-ext-diff --no-textconv "${{@:2}}";; '
    f'{"|".join(_NO_TEXTCONV_ONLY)}) set -- "$1" --no-textconv "${{@:2}}";; esac; '
    "command git --no-pager " + " ".join(f"-c {c}" for c in SAFE_CONFIG) + ' "${pre[@]}" "$@"; }'
)
"""The body of the exported bash function `git` for read-only lines. Global options come first (the
read-only allowance admits only flags there: `--no-pager`, `--literal-pathspecs`, ...)."""


def read_only_git_env(command: str) -> dict[str, str]:
    """The environment to add when running `command`: the `git` function above when every simple
    command of the line is read-only (or `cd`) and one of them is git; otherwise nothing (a line the
    user approved or a rule admitted runs as written)."""
    try:
        commands = parse(command)
    except ShellParseError:
        return {}
    uses_git = False
    for cmd in commands:
        argv = [w.text for w in cmd.argv]
        if not argv or argv[0] in ("cd", "pushd", "popd"):
            continue
        if not read_only(argv):
            return {}
        uses_git = uses_git or argv[0] == "git"
    return {"BASH_FUNC_git%%": GIT_FUNCTION} if uses_git else {}


def _is_bare(directory: Path) -> bool:
    """True when git would take `directory` itself for a (bare) repository."""
    return (directory / "HEAD").is_file() and (directory / "objects").is_dir() and (directory / "refs").is_dir()


def foreign_repository(directory: Path, workspace: Path) -> Path | None:
    """A repository other than the workspace's own that git run in `directory` would use (see the
    module doc), or None. A directory outside the workspace counts as one (its repository, if any, is
    not the workspace's)."""
    root = Path(os.path.realpath(workspace))
    here = Path(os.path.realpath(directory))
    if here != root and root not in here.parents:
        return here
    while True:
        if _is_bare(here) or (here != root and (here / ".git").exists()):
            return here
        if here == root:
            return None
        here = here.parent
