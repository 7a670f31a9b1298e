"""The read-only allowance without the OS sandbox: a short fixed list of programs and exact options.

With bubblewrap, a command the program table judges read-only runs in the read-only sandbox, so a gap
in the table cannot write or leak. Without it (bwrap missing or unusable, or `--sandbox off`) nothing
would catch such a gap, so the allowance shrinks to `SHORT_LIST`: programs that cannot run other
programs or write files, each with the exact option spellings it may use (no prefixes, no bundles
beyond those written here, no `--opt=value` unless listed). Anything else asks (or is refused where
nobody can answer). docs/permissions.md prints this list.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

__all__ = ["SHORT_LIST", "short_list_admits"]

_NUMBER: Final = re.compile(r"-?[0-9]+")
_LS: Final = frozenset(
    {
        "-l",
        "-a",
        "-A",
        "-la",
        "-al",
        "-lh",
        "-lah",
        "-alh",
        "-1",
        "-R",
        "-h",
        "-t",
        "-S",
        "-r",
        "-F",
        "-d",
        "-ld",
        "-lt",
        "-ltr",
        "-latr",
    }
)
_GREP: Final = frozenset(
    {
        "-n",
        "-i",
        "-l",
        "-L",
        "-c",
        "-v",
        "-w",
        "-x",
        "-E",
        "-F",
        "-H",
        "-h",
        "-o",
        "-r",
        "-rn",
        "-rni",
        "-ri",
        "-in",
        "-ni",
        "-nr",
        "-e",
        "-q",
        "-s",
    }
)
SHORT_LIST: Final[dict[str, frozenset[str]]] = {
    "ls": _LS,
    "cat": frozenset({"-n", "-A", "-v"}),
    "head": frozenset({"-n", "-c"}),
    "tail": frozenset({"-n", "-c"}),
    "wc": frozenset({"-l", "-w", "-c", "-m"}),
    "grep": _GREP,
    "egrep": _GREP,
    "fgrep": _GREP,
    "pwd": frozenset(),
    "echo": frozenset({"-n", "-e"}),
    "true": frozenset(),
    "false": frozenset(),
    "basename": frozenset(),
    "dirname": frozenset(),
    "realpath": frozenset(),
    "stat": frozenset(),
    "file": frozenset(),
    "which": frozenset(),
    "whoami": frozenset(),
    "id": frozenset(),
    "uname": frozenset({"-a", "-s", "-r", "-m"}),
    "du": frozenset({"-s", "-h", "-sh", "-hs"}),
    "df": frozenset({"-h"}),
    "cd": frozenset(),
}
"""Program -> the exact option words it may carry. Operands (words not starting with `-`) are file
names and patterns, checked for sensitive files by the bash decision as always; a number after an
option that takes one (`head -n 5`, `tail -20`) is allowed."""


def short_list_admits(argv: Sequence[str]) -> bool:
    """True when `argv` is a program of SHORT_LIST using only its listed option spellings."""
    if not argv or argv[0] not in SHORT_LIST:
        return False
    allowed = SHORT_LIST[argv[0]]
    after_dashdash = False
    for word in argv[1:]:
        if after_dashdash or not word.startswith("-") or word == "-":
            continue
        if word == "--":
            after_dashdash = True
        elif word not in allowed and not (argv[0] in ("head", "tail") and _NUMBER.fullmatch(word)):
            return False
    return True
