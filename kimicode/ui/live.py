"""The live region: the few short lines at the bottom of the terminal that are redrawn in place.

Everything above the region is ordinary scrollback, written once. The region is redrawn by moving up over
the previous frame and erasing to the end of the screen, so it must know how many rows that frame takes
*now*, after the window may have been resized under it. Terminals that reflow (tmux, VTE, kitty, iTerm2,
Windows Terminal…) re-wrap a line that has become longer than the new width, hard line or not, and keep
the cursor under it; so a row drawn `cells` wide occupies `ceil(cells / width)` rows at the current width.
The region is kept safe by construction:

- every row is short: at most `live_width(width)` cells, a third of the width (never the full width, which
  would leave the cursor waiting to wrap). tmux tells a program about a resize up to 250 ms after it has
  re-wrapped the screen, so a frame drawn with a width that is already stale still fits unless the window
  shrank to under a third of its width within that quarter of a second;
- the width is read at every frame (not only on SIGWINCH), and the previous frame's rows are counted
  again at the current width before they are erased;
- the region never moves to the top-left of the screen or erases the screen (tmux copies a cleared
  screen into its history), and it never queries the cursor position (no reply can leak as text).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import IO

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

_HIDE_CURSOR = "\x1b[?25l"
_SHOW_CURSOR = "\x1b[?25h"
_ANSI = re.compile(r"\x1b\[[0-9;:?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")

LIVE_MIN = 30
"""Cells a live row may take on any terminal at least this wide (a third of the width is less below 90)."""
LIVE_MAX_ROWS = 12
"""Rows the live region takes at most (it must still fit the screen once a narrowing has re-wrapped it)."""


def live_width(width: int) -> int:
    """Cells a live row may take at terminal width `width`: a third of it (at least `LIVE_MIN`), never all."""
    return max(1, min(width - 1, max(LIVE_MIN, width // 3)))


def visible_cells(line: str) -> int:
    """Display width of an escape-coded line."""
    return cell_len(_ANSI.sub("", line))


_LINE_END = re.compile(r"(?:\x1b\[[0-9;]*m| )+$")
_SGR = re.compile(r"\x1b\[([0-9;]*)m")


def _painted(params: str, painted: bool) -> bool:
    """Whether spaces show a background (or reverse video) after an SGR sequence with `params`."""
    codes = params.split(";")
    i = 0
    while i < len(codes):
        code = int(codes[i]) if codes[i].isdigit() else 0
        if code in (38, 48, 58):  # extended colour: skip its arguments
            skip = 2 if i + 1 < len(codes) and codes[i + 1] == "5" else 4
            painted = painted or code == 48
            i += skip + 1
            continue
        if code in (0, 49, 27):
            painted = False
        elif 40 <= code <= 47 or 100 <= code <= 107 or code == 7:
            painted = True
        i += 1
    return painted


def _trim(line: str) -> str:
    """The line without the spaces rich pads it with to the full width (unless they paint a background)."""
    end = _LINE_END.search(line)
    if end is None:
        return line
    painted = False
    for match in _SGR.finditer(line, 0, end.start()):
        painted = _painted(match.group(1), painted)
    for piece in re.split(r"(\x1b\[[0-9;]*m)", end.group(0)):
        sgr = _SGR.fullmatch(piece)
        if sgr is not None:
            painted = _painted(sgr.group(1), painted)
        elif piece and painted:
            return line
    return line[: end.start()] + ("\x1b[0m" if "\x1b" in end.group(0) else "")


def trim_rows(text: str) -> str:
    """`text` with each line's padding removed: a padded line longer than a narrowed window would be
    re-wrapped into an extra, blank row."""
    return "\n".join(_trim(line) for line in text.split("\n"))


def erase_up(rows: int) -> str:
    """Move to the start of the line `rows` lines up and erase everything below."""
    if rows <= 0:
        return "\r\x1b[J"
    return f"\r\x1b[{rows}A\x1b[J"


class LiveRegion:
    """The lines at the bottom of the terminal that are redrawn in place; the rest is scrollback.

    `content()` gives the live parts (escape-coded text, each ending with a newline, or empty). They are
    written as whole lines, so the cursor rests at column 0 below them. A redraw moves up over the region,
    erases to the end of the screen and writes the new frame in a single write: the terminal never shows
    a half-drawn frame. Rows longer than `live_width` are cut (with `console`, which knows the colours;
    producers are expected to keep them short), at most `LIVE_MAX_ROWS` and `height() - 2` rows are shown
    (the last ones), so the region never scrolls, even after a narrowing re-wrapped it.
    """

    def __init__(
        self,
        file: IO[str],
        height: Callable[[], int],
        content: Callable[[], list[str]],
        *,
        width: Callable[[], int] | None = None,
        console: Console | None = None,
    ) -> None:
        self.file = file
        self._height = height
        self._width = width or (lambda: console.size.width if console is not None else 80)
        self._console = console
        self._content = content
        self._drawn: list[int] = []
        """The display width of each row of the last frame, as drawn."""
        self._cursor_hidden = False
        self._paused = False
        self._held: list[str] = []

    @property
    def paused(self) -> bool:
        """True while a question (an approval menu) owns the screen: nothing of the turn is drawn, and text
        printed meanwhile (a late reasoning line, a parallel call's result) is held until it is answered."""
        return self._paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self._paused = value
        if not value and self._held:
            held, self._held = "".join(self._held), []
            self.file.write(held)
            self.file.flush()

    def _rows_now(self) -> int:
        """How many rows the last frame takes at the current width (a narrowing may have re-wrapped it)."""
        width = max(1, self._width())
        return sum(max(1, -(-cells // width)) for cells in self._drawn)

    def _fit(self, line: str, cap: int) -> tuple[str, int]:
        cells = visible_cells(line)
        if cells <= cap:
            return line, cells
        if self._console is not None:
            text = Text.from_ansi(line)
            text.truncate(cap, overflow="ellipsis")
            with self._console.capture() as capture:
                self._console.print(text, end="", soft_wrap=True)
            line = capture.get()
            return line, visible_cells(line)
        return line, cells

    def _frame(self) -> str:
        if self.paused:
            self._drawn = []
            return ""
        lines = [line.rstrip(" ") for line in "".join(self._content()).splitlines()]
        limit = max(1, min(LIVE_MAX_ROWS, self._height() - 2))
        if len(lines) > limit:
            lines = lines[-limit:]
        cap = live_width(self._width())
        fitted = [self._fit(line, cap) for line in lines]
        self._drawn = [cells for _line, cells in fitted]
        out = "".join(line + "\n" for line, _cells in fitted)
        if lines and not self._cursor_hidden:
            out = _HIDE_CURSOR + out
            self._cursor_hidden = True
        return out

    def _erase(self) -> str:
        return erase_up(self._rows_now()) if self._drawn else ""

    def redraw(self) -> None:
        """Draw the current content in place of the previous frame."""
        erase = self._erase()
        frame = self._frame()
        if erase or frame:
            self.file.write(erase + frame)
            self.file.flush()

    def print_above(self, text: str) -> None:
        """Write `text` (ending with a newline) into scrollback, then redraw the live lines below it (held
        while `paused`)."""
        if self._paused:
            self._held.append(trim_rows(text))
            return
        erase = self._erase()
        self.file.write(erase + trim_rows(text) + self._frame())
        self.file.flush()

    def clear(self) -> None:
        """Erase the live lines and show the cursor again; `redraw()` brings them back."""
        out = self._erase()
        if self._cursor_hidden:
            out += _SHOW_CURSOR
            self._cursor_hidden = False
        self._drawn = []
        if out:
            self.file.write(out)
            self.file.flush()

    @property
    def rows(self) -> int:
        """How many lines the last frame took (as drawn)."""
        return len(self._drawn)
