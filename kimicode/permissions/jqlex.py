"""What a jq (gojq, jaq, yq) program names, read as jq's lexer reads it: so `$ ENV` (a space between), a
comment, or `"\\(env)"` inside a string cannot hide that the program reads the environment or files.

`program_reaches(text)` tokenizes the program (identifiers, `$`, `.`, strings with their `\\(...)`
interpolations, comments) and returns why it is not read-only, or None: the builtins and variables that
read the environment or files (`env`, `$ENV`, `$__prog...`, yq's `strenv`, `load`, `load_str`,
`filename`) and modules (`import`, `include`) are found wherever the lexer would see them, and
`.env` (a field) is not one. Text the lexer cannot finish (an open string) counts as reaching.
"""

from __future__ import annotations

from typing import Final

__all__ = ["program_reaches"]

_READS: Final = frozenset({"env", "strenv", "load", "load_str", "filename", "import", "include"})
"""Identifiers that read the environment, a file or a module (jq's, gojq's, jaq's and yq's)."""
_IDENT_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_IDENT: Final = _IDENT_START | frozenset("0123456789")


def _tokens(text: str) -> list[str]:
    """The program's tokens: identifiers, and single characters for everything else (strings add the
    tokens of their interpolations); raises ValueError on an unterminated string."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 2 if text[i] == "\\" else 1
        elif c == '"':
            i = _string(text, i + 1, out)
        else:
            i = _word(text, i, out)
    return out


def _word(text: str, i: int, out: list[str]) -> int:
    """Add the token at `i` (`..`, an identifier, a `.field`, or one character) to `out`; returns the
    index after it. `.name` is jq's FIELD (no space allowed inside): one token, never a builtin."""
    n = len(text)
    c = text[i]
    if text[i : i + 2] == "..":
        out.append("..")
        return i + 2
    if c in _IDENT_START or (c == "." and i + 1 < n and text[i + 1] in _IDENT_START):
        j = i + 1
        while j < n and text[j] in _IDENT:
            j += 1
        out.append(text[i:j])
        return j
    out.append(c)
    return i + 1


def _string(text: str, i: int, out: list[str]) -> int:
    """Skip a string from `i` (after its quote) to after its closing quote, adding its interpolations'
    tokens to `out`; returns the index after the string."""
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            return i + 1
        if c == "\\" and i + 1 < n and text[i + 1] == "(":
            end = _closing(text, i + 2)
            out.append("(")
            out += _tokens(text[i + 2 : end])
            out.append(")")
            i = end + 1
        else:
            i += 2 if c == "\\" else 1
    raise ValueError("unterminated string")


def _closing(text: str, i: int) -> int:
    """The index of the `)` closing an interpolation that starts at `i` (strings inside skipped)."""
    depth, n = 1, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i = _string(text, i + 1, [])
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError("unterminated interpolation")


def program_reaches(text: str) -> str | None:
    """Why the jq program `text` is not read-only (it reads the environment, files or modules), or None."""
    try:
        tokens = _tokens(text)
    except ValueError:
        return "the jq program could not be read to its end (an open string)"
    for k, token in enumerate(tokens):
        before = tokens[k - 1] if k else ""
        if before == "$":
            if token == "ENV" or token.startswith("__"):
                return f"the jq program reads ${token} (the environment, which may hold secrets)"
            continue
        if token in _READS:  # `.env` is a field: one token, never in the set
            return f"the jq program uses {token} (it reads the environment, a file or a module)"
    return None
