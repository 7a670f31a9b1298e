"""Making model-controlled text safe to show in a terminal.

A command, a path, a diff, tool output or a file name chosen by the model may hold terminal control
sequences: `\\x1b[2K\\r` erases the line so a command can be displayed as another, OSC 8 makes a hidden
link, OSC 52 writes the clipboard, `\\x9b` is a one-byte CSI, backspaces overwrite what was shown and
U+202E reverses what follows. `sanitize` is the one function the terminal UI and the headless text
output use before showing such text:

- escape sequences (CSI, OSC, DCS/APC/PM/SOS strings, two-character ESC sequences, their C1 forms)
  are removed (`sequences="strip"`, for output whose colours may be dropped) or shown as visible text
  (`sequences="escape"`, for what the user approves: nothing hidden);
- every other control character (C0 but `\\n` and `\\t`, DEL, C1) and every character that is invisible
  or changes how text reads is shown escaped (`\\x08`, `\\u202e`), since it cannot be shown faithfully.
  That is decided by Unicode category, not by a list: format characters (Cf: bidirectional controls,
  zero-width joiners and spaces, word joiner, tag characters, soft hyphen), private use (Co),
  unassigned (Cn), surrogates (Cs), line and paragraph separators (Zl, Zp), plus the filler letters
  that draw nothing (Hangul fillers U+115F, U+1160, U+3164, U+FFA0, braille blank U+2800) and the other
  default-ignorable code points (U+034F COMBINING GRAPHEME JOINER, U+17B4, U+17B5, U+180B-180F, ...);
- `\\r\\n` becomes `\\n`; with `newlines=False` a newline is shown as `\\n` too.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final, Literal

__all__ = ["sanitize"]

_SEQUENCE: Final = re.compile(
    r"""
    (?:\x1b\[|\x9b) [0-?]* [ -/]* [@-~]?                 # CSI (final byte may be missing at the end)
  | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])              # OSC, DCS, SOS, PM, APC ...
      [^\x07\x1b\x9c\n]* (?:\x07|\x1b\\|\x9c)?            # ... up to their terminator (or the line's end)
  | \x1b [ -/]* [0-~]?                                   # other ESC sequences (ESC c, ESC 7, ESC ( B)
    """,
    re.VERBOSE,
)
_CATEGORIES: Final = frozenset({"Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp"})
FILLERS: Final = frozenset("\u115f\u1160\u3164\uffa0\u2800")
"""Letters (category Lo/So) that draw nothing: a name made of them looks empty or like another."""


_IGNORABLE: Final = (
    (0x034F, 0x034F),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x2065, 0x2065),
    (0xFFF0, 0xFFF8),
    (0xE0000, 0xE00FF),
    (0xE01F0, 0xE0FFF),
)
"""Unicode's default-ignorable code points that are not format characters (DerivedCoreProperties:
Other_Default_Ignorable_Code_Point and the Mongolian variation selectors): U+034F COMBINING GRAPHEME
JOINER, Khmer inherent vowels, reserved ranges. They draw nothing. The variation selectors U+FE00-FE0F
and U+E0100-E01EF are left alone: they choose how an emoji or a CJK character is drawn."""


def _ignorable(code: int) -> bool:
    return any(first <= code <= last for first, last in _IGNORABLE)


def _escaped(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _is_unsafe(ch: str) -> bool:
    """Control, format, private-use, unassigned, separator or filler (see the module docstring)."""
    return ch not in "\n\t" and (unicodedata.category(ch) in _CATEGORIES or ch in FILLERS or _ignorable(ord(ch)))


_ASCII_UNSAFE: Final = re.compile("[\\x00-\\x08\\x0a-\\x1f\\x7f]")
_ASCII_UNSAFE_KEEP_NL: Final = re.compile("[\\x00-\\x08\\x0b-\\x1f\\x7f]")
_PATTERNS: dict[bool, re.Pattern[str]] = {}


def _unsafe_pattern(newlines: bool) -> re.Pattern[str]:
    """Every unsafe character as one regex class: the BMP by category (both variants computed together
    on first use, about 60 ms), and every astral character (checked one by one in `_fix`)."""
    found = _PATTERNS.get(newlines)
    if found is not None:
        return found
    ranges: list[str] = []
    start = None
    for code in range(0x10000):
        bad = _is_unsafe(chr(code))
        if bad and start is None:
            start = code
        elif not bad and start is not None:
            ranges.append(_range(start, code - 1))
            start = None
    if start is not None:
        ranges.append(_range(start, 0xFFFF))
    body = "".join(ranges) + "\\U00010000-\\U0010ffff"
    _PATTERNS[True] = re.compile(f"[{body}]")
    _PATTERNS[False] = re.compile(f"[\\n{body}]")
    return _PATTERNS[newlines]


def _range(first: int, last: int) -> str:
    return f"\\u{first:04x}" if first == last else f"\\u{first:04x}-\\u{last:04x}"


def _fix(match: re.Match[str], newlines: bool) -> str:
    ch = match.group()
    return _escaped(ch) if _is_unsafe(ch) or (ch == "\n" and not newlines) else ch


def sanitize(text: str, *, sequences: Literal["strip", "escape"] = "strip", newlines: bool = True) -> str:
    """`text` safe to print in a terminal (see the module docstring); plain text is returned unchanged."""
    ascii_only = _ASCII_UNSAFE_KEEP_NL if newlines else _ASCII_UNSAFE
    unsafe = ascii_only if text.isascii() else _unsafe_pattern(newlines)
    if not unsafe.search(text):  # the common case, one regex scan
        return text
    text = text.replace("\r\n", "\n")
    every = _unsafe_pattern(False)
    if sequences == "strip":
        text = _SEQUENCE.sub("", text)
    else:
        text = _SEQUENCE.sub(lambda m: every.sub(lambda c: _fix(c, False), m.group()), text)
    return unsafe.sub(lambda c: _fix(c, newlines), text)
