"""Making model-controlled text safe to show in a terminal.

A command, a path, a diff, tool output or a file name chosen by the model may hold terminal control
sequences: `\\x1b[2K\\r` erases the line so a command can be displayed as another, OSC 8 makes a hidden
link, OSC 52 writes the clipboard, `\\x9b` is a one-byte CSI, backspaces overwrite what was shown and
U+202E reverses what follows. `sanitize` is the one function the terminal UI and the headless text
output use before showing such text:

- escape sequences (CSI, OSC, DCS/APC/PM/SOS strings, two-character ESC sequences, their C1 forms)
  are removed (`sequences="strip"`, for output whose colours may be dropped) or shown as visible text
  (`sequences="escape"`, for what the user approves: nothing hidden);
- every other control character (C0 but `\\n` and `\\t`, DEL, C1) and the invisible characters that
  change how text reads (bidirectional overrides and isolates, zero-width spaces, line separators,
  BOM) are shown escaped (`\\x08`, `\\u202e`), since they cannot be shown faithfully;
- `\\r\\n` becomes `\\n`; with `newlines=False` a newline is shown as `\\n` too.
"""

from __future__ import annotations

import re
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
_INVISIBLE: Final = frozenset(
    "\u061c\u200b\u200c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029\ufeff"
)
"""Bidirectional controls, zero-width space/non-joiner, line/paragraph separators, BOM (ZWJ is kept:
emoji sequences need it)."""


def _escaped(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _is_unsafe(ch: str) -> bool:
    code = ord(ch)
    return code < 0x20 or 0x7F <= code < 0xA0 or ch in _INVISIBLE


_INVISIBLE_CLASS: Final = "".join(f"\\u{ord(c):04x}" for c in sorted(_INVISIBLE))
_UNSAFE: Final = re.compile(f"[\\x00-\\x08\\x0a-\\x1f\\x7f-\\x9f{_INVISIBLE_CLASS}]")
_UNSAFE_KEEP_NL: Final = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_INVISIBLE_CLASS}]")


def sanitize(
    text: str, *, sequences: Literal["strip", "escape"] = "strip", newlines: bool = True
) -> str:
    """`text` safe to print in a terminal (see the module docstring); plain text is returned unchanged."""
    unsafe = _UNSAFE_KEEP_NL if newlines else _UNSAFE
    if not unsafe.search(text):  # the common case, one regex scan
        return text
    text = text.replace("\r\n", "\n")
    if sequences == "strip":
        text = _SEQUENCE.sub("", text)
    else:
        text = _SEQUENCE.sub(lambda m: _UNSAFE.sub(lambda c: _escaped(c.group()), m.group()), text)
    return unsafe.sub(lambda c: _escaped(c.group()), text)
