"""The values the shell parser (`kimicode.permissions.shellparse`) returns: words, redirections and
simple commands."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

__all__ = ["CONTROL_CHARACTERS", "Redirect", "RedirectKind", "SimpleCommand", "Word", "why_not_static"]

CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
"""Characters a terminal would not show as written."""


@dataclass(frozen=True)
class Word:
    """One word of a command: `text` is its value after quote removal, with expansions kept as written."""

    text: str
    raw: str
    """The word exactly as it appears in the command line."""
    dynamic: bool = False
    """True when bash would expand it ($VAR, $(...), globs, braces, $'...'): its value is not `text`."""
    tilde: bool = False
    """True when it starts with an unquoted `~` (bash replaces it with a home directory)."""

    @property
    def static(self) -> bool:
        """True when bash would pass `text` unchanged: no expansion at all, `~`/`~/...` excepted (the
        caller expands those), and no text that bash may evaluate later as code when it is used as a
        variable name, array subscript or arithmetic (`printf -v 'a[$(cmd)]'`, `read`, `test -v`)."""
        if self.dynamic:
            return False
        if self.tilde and not (self.text == "~" or self.text.startswith("~/")):
            return False  # ~user/...: another user's home
        return not _CODE_IN_TEXT.search(self.text)


RedirectKind = Literal["write", "read", "dup", "heredoc", "herestring"]

_WRITE_OPS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})


@dataclass(frozen=True)
class Redirect:
    """A redirection: `op` as written (`>`, `>>`, `2>`'s `>` with fd "2", `<`, `<<`, `>&`, ...)."""

    op: str
    target: Word
    fd: str = ""

    @property
    def kind(self) -> RedirectKind:
        """`write` (a file is created or changed), `read`, `dup` (`2>&1`, `>&-`), or a here-document/string."""
        if self.op in ("<<", "<<-"):
            return "heredoc"
        if self.op == "<<<":
            return "herestring"
        if self.op in (">&", "<&"):
            if re.fullmatch(r"[0-9]+-?|-", self.target.text) and not self.target.dynamic:
                return "dup"
            return "write" if self.op == ">&" else "read"
        if self.op in _WRITE_OPS:
            return "write"
        return "read"


_CODE_IN_TEXT = re.compile(r"\$[({]|`|[\x00-\x08\x0b-\x1f\x7f]")
"""Text that bash runs when it evaluates a word as a name or number, and control characters."""

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")


@dataclass(frozen=True)
class SimpleCommand:
    """One simple command: its words (leading `NAME=value` assignments included) and redirections."""

    words: tuple[Word, ...]
    redirects: tuple[Redirect, ...] = ()

    @property
    def assignments(self) -> tuple[Word, ...]:
        """The leading `NAME=value` words."""
        out: list[Word] = []
        for word in self.words:
            if not _ASSIGNMENT.match(word.raw):
                break
            out.append(word)
        return tuple(out)

    @property
    def argv(self) -> tuple[Word, ...]:
        """The words after the assignments: the command name and its arguments."""
        return self.words[len(self.assignments) :]

    @property
    def name(self) -> Word | None:
        """The command name, or None for a command made only of assignments and redirections."""
        argv = self.argv
        return argv[0] if argv else None

    @cached_property
    def text(self) -> str:
        """The words joined by single spaces (what a rule pattern is matched against).

        A word holding whitespace is shown in single quotes, so `'git status'` (one word: a program
        with a space in its name) never reads as `git status`.
        """
        return " ".join(_show(w.text) for w in self.words)


def _show(text: str) -> str:
    if text and not any(c.isspace() for c in text):
        return text
    return "'" + text.replace("'", "'\\''") + "'"


def why_not_static(cmd: SimpleCommand) -> str | None:
    """Why a command is not static (a word or a redirection target that bash would expand), or None."""
    for word in cmd.words:
        if word.dynamic:
            return f"{word.raw!r} is expanded by bash (variables, globs, braces or substitutions)"
        if CONTROL_CHARACTERS.search(word.text):
            return f"{word.raw!r} holds control characters (what is shown is not what runs)"
        if word.tilde and not (word.raw == "~" or word.raw.startswith("~/")):
            return f"{word.raw!r} names another user's home"
    for redirect in cmd.redirects:
        if CONTROL_CHARACTERS.search(redirect.target.text):
            return f"{redirect.target.raw!r} holds control characters"
        if redirect.target.dynamic:
            what = "a here-document that expands" if redirect.kind == "heredoc" else f"{redirect.target.raw!r}"
            return f"{what} is expanded by bash"
    return None
