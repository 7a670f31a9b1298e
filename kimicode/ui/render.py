"""Streaming Markdown for the terminal: finished blocks go to scrollback once, only the open block is live.

`BlockSplitter` cuts a stream of Markdown text into top-level blocks (paragraphs, fenced code, lists,
tables, headings) as soon as each is known to be complete. `LiveRegion` owns the few lines at the bottom
of the terminal that are redrawn in place (the block still being written and a status line); everything
above it is ordinary scrollback, written once. `MarkdownStream` joins the two: each delta costs a scan of
the new text; a finished block is rendered once with `rich.markdown.Markdown`; the open block is
re-rendered at most `min_interval` seconds apart, and only its visible tail.
"""

from __future__ import annotations

import contextlib
import copy
import re
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

from rich.console import Console, RenderableType
from rich.markdown import Markdown
from rich.text import Text

CODE_THEME = "monokai"

_FENCE_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_LIST_ITEM = re.compile(r"^ {0,3}([-+*]|\d{1,9}([.)]))(?:[ \t]|$)")
_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")

# Terminal control sequences (CSI): cursor up N lines, erase from the cursor to the end of the screen.
_HIDE_CURSOR = "\x1b[?25l"
_SHOW_CURSOR = "\x1b[?25h"


def _erase_up(rows: int) -> str:
    """Move to the start of the line `rows` lines up and erase everything below."""
    if rows <= 0:
        return "\r\x1b[J"
    return f"\r\x1b[{rows}A\x1b[J"


def render_ansi(console: Console, renderable: RenderableType) -> str:
    """Render to the console's escape-coded text (colours as the console would print them)."""
    with console.capture() as capture:
        console.print(renderable)
    return capture.get()


_PROTOTYPE: Markdown | None = None
_PARSER: Any = None


def markdown(source: str) -> Markdown:
    """The Markdown renderable used everywhere in the UI (no OSC-8 hyperlinks: they garble some terminals).

    `rich.markdown.Markdown` builds a new markdown-it parser per instance, a tenth of the cost of a small
    render; here one parser is reused and the instance is a copy of a prototype with the new source.
    """
    global _PROTOTYPE, _PARSER
    if _PROTOTYPE is None:
        _PROTOTYPE = Markdown("", code_theme=CODE_THEME, hyperlinks=False)
        try:
            from markdown_it import MarkdownIt

            _PARSER = MarkdownIt().enable("strikethrough").enable("table")
        except ImportError:  # pragma: no cover - markdown-it is a dependency of rich
            _PARSER = None
    if _PARSER is None or not hasattr(_PROTOTYPE, "parsed"):
        return Markdown(source, code_theme=CODE_THEME, hyperlinks=False)
    md = copy.copy(_PROTOTYPE)
    md.markup = source
    md.parsed = _PARSER.parse(source)
    return md


class BlockSplitter:
    """Split streamed Markdown into complete top-level blocks.

    `feed()` returns the blocks completed by the new text; `open_block()` is the source of the block still
    being written. Completed lines are scanned once, so the total cost is linear in the text. A block ends
    at a blank line (unless the next line continues a list), right after a top-level closing code fence,
    and right after a heading line; blank lines inside a fence never split it.
    """

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._partial = ""
        self._blank_pending = False
        self._fence: tuple[str, int] | None = None  # (fence character, length) while inside a fence
        self._fence_top = False  # the open fence started the block at the top level

    def feed(self, text: str) -> list[str]:
        """Add streamed text; return the blocks it completed, in order."""
        done: list[str] = []
        if "\n" not in text:
            self._partial += text
            if self._blank_pending and self._ends_list(self._partial):
                self._emit(done)
            return done
        parts = (self._partial + text).split("\n")
        self._partial = parts.pop()
        for line in parts:
            self._line(line, done)
        if self._blank_pending and self._partial and self._ends_list(self._partial):
            self._emit(done)
        return done

    def finish(self) -> list[str]:
        """End of stream: return the remaining block(s)."""
        done: list[str] = []
        if self._partial:
            self._line(self._partial, done)
            self._partial = ""
        if self._lines:
            done.append("\n".join(self._lines))
            self._lines = []
        self._fence = None
        self._blank_pending = False
        return done

    def open_block(self, max_lines: int | None = None) -> str:
        """The source of the block being written (with the partial last line), at most its last `max_lines`.

        When cropped inside a code fence the opening fence line is kept so the tail still renders as code.
        """
        lines = self._lines
        if max_lines is not None and len(lines) > max_lines:
            tail = lines[-max_lines:]
            if self._fence is not None and lines and _FENCE_OPEN.match(lines[0]):
                tail = [lines[0], *tail[1:]]
            lines = tail
        if self._partial:
            return "\n".join([*lines, self._partial]) if lines else self._partial
        return "\n".join(lines)

    @property
    def has_open_block(self) -> bool:
        return bool(self._lines or self._partial.strip())

    def _emit(self, done: list[str]) -> None:
        if self._lines:
            done.append("\n".join(self._lines))
        self._lines = []
        self._blank_pending = False

    def _line(self, line: str, done: list[str]) -> None:
        if self._fence is not None:
            self._lines.append(line)
            char, length = self._fence
            stripped = line.strip()
            if stripped.startswith(char * length) and not stripped.strip(char):
                self._fence = None
                if self._fence_top:
                    self._emit(done)
            return
        if not line.strip():
            if self._in_list():
                self._blank_pending = True  # a list may go on after a blank line
            elif self._lines:
                self._emit(done)
            return
        if self._blank_pending:
            if self._continues_list(line):
                self._lines.append("")
                self._blank_pending = False
            else:
                self._emit(done)
        fence = _FENCE_OPEN.match(line)
        if fence and not (fence.group(2)[0] == "`" and "`" in fence.group(3)):
            if self._lines and not self._in_list():
                self._emit(done)  # a fence interrupts a paragraph: it starts a block of its own
            self._fence = (fence.group(2)[0], len(fence.group(2)))
            self._fence_top = not self._lines
            self._lines.append(line)
            return
        if _HEADING.match(line) and not self._in_list():
            self._emit(done)
            self._lines.append(line)
            self._emit(done)
            return
        self._lines.append(line)

    def _in_list(self) -> bool:
        return bool(self._lines) and bool(_LIST_ITEM.match(self._lines[0]))

    def _ends_list(self, partial: str) -> bool:
        """After a list and a blank line, does the start of the next line already show the list is over?"""
        if partial[0] in " \t":
            return False
        item = _LIST_ITEM.match(partial)
        if item is not None:
            return _list_kind(item) != _list_kind(_LIST_ITEM.match(self._lines[0]))
        # not (yet) an item: decided once it can no longer become one ("12345678901. " is the longest)
        return not re.match(r"^(?:[-+*]|\d{1,9}[.)]?)$", partial)

    def _continues_list(self, line: str) -> bool:
        """After a blank line, an indented line or another item of the same kind keeps a list going."""
        if not self._in_list():
            return False
        if line.startswith((" ", "\t")):
            return True
        item = _LIST_ITEM.match(line)
        return item is not None and _list_kind(item) == _list_kind(_LIST_ITEM.match(self._lines[0]))


def _list_kind(item: re.Match[str] | None) -> str:
    """`-`, `+`, `*`, or `.`/`)` for ordered lists: items of another kind start a new list."""
    if item is None:
        return ""
    return item.group(2) or item.group(1)


class LiveRegion:
    """The lines at the bottom of the terminal that are redrawn in place; the rest is scrollback.

    `content()` gives the live parts (escape-coded text, each ending with a newline, or empty). They are
    written as whole lines, so the cursor rests at column 0 below them. A redraw moves up over the region,
    erases to the end of the screen and writes the new frame in a single write: the terminal never shows
    a half-drawn frame. Only the last `height() - 2` lines are shown, so the region never scrolls.
    """

    def __init__(self, file: IO[str], height: Callable[[], int], content: Callable[[], list[str]]) -> None:
        self.file = file
        self._height = height
        self._content = content
        self._rows = 0
        self._cursor_hidden = False
        self.paused = False

    def _frame(self) -> str:
        if self.paused:
            self._rows = 0
            return ""
        lines = "".join(self._content()).splitlines()
        limit = max(1, self._height() - 2)
        if len(lines) > limit:
            lines = lines[-limit:]
        self._rows = len(lines)
        out = "".join(line + "\n" for line in lines)
        if lines and not self._cursor_hidden:
            out = _HIDE_CURSOR + out
            self._cursor_hidden = True
        return out

    def redraw(self) -> None:
        """Draw the current content in place of the previous frame."""
        erase = _erase_up(self._rows) if self._rows else ""
        frame = self._frame()
        if erase or frame:
            self.file.write(erase + frame)
            self.file.flush()

    def print_above(self, text: str) -> None:
        """Write `text` (ending with a newline) into scrollback, then redraw the live lines below it."""
        erase = _erase_up(self._rows) if self._rows else ""
        self.file.write(erase + text + self._frame())
        self.file.flush()

    def clear(self) -> None:
        """Erase the live lines and show the cursor again; `redraw()` brings them back."""
        out = _erase_up(self._rows) if self._rows else ""
        if self._cursor_hidden:
            out += _SHOW_CURSOR
            self._cursor_hidden = False
        self._rows = 0
        if out:
            self.file.write(out)
            self.file.flush()

    @property
    def rows(self) -> int:
        """How many lines the last frame took."""
        return self._rows


class MarkdownStream:
    """Render one streamed Markdown answer.

    With a `LiveRegion`, finished blocks are printed once into scrollback and the open block is offered
    through `live_text()` (the region's content callback shows it); it is re-rendered at most every
    `min_interval` seconds of `clock`. Without a region (plain output) the text is written through as is.
    """

    def __init__(
        self,
        console: Console,
        live: LiveRegion | None,
        *,
        min_interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console
        self.live = live
        self.min_interval = min_interval
        self.clock = clock
        self._splitter = BlockSplitter()
        self._blocks = 0
        self._dirty = False
        self._last_draw = float("-inf")
        self._open_render = ""
        self._plain_last = ""
        self.redraws = 0
        """How many times the open block was rendered (reported by the benchmark)."""

    def feed(self, text: str) -> None:
        """Add a delta of the answer."""
        if not text:
            return
        if self.live is None:
            self.console.file.write(text)
            self.console.file.flush()
            self._plain_last = text[-1]
            return
        committed = False
        for block in self._splitter.feed(text):
            committed = self._commit(block) or committed
        self._dirty = True
        self.refresh(force=committed)

    def refresh(self, force: bool = False, draw: bool = True) -> None:
        """Re-render the open block if it changed and `min_interval` has passed (or `force`).

        The live region is redrawn unless `draw` is false (the caller redraws it anyway).
        """
        if self.live is None or not self._dirty:
            return
        now = self.clock()
        if force or now - self._last_draw >= self.min_interval:
            self._render_open()
            self._last_draw = now
            if draw:
                self.live.redraw()

    def live_text(self) -> str:
        """The rendered open block (empty when there is none)."""
        return self._open_render

    def finish(self) -> None:
        """The answer is complete: print what remains as finished blocks and drop the live block."""
        if self.live is None:
            if self._plain_last and self._plain_last != "\n":
                self.console.file.write("\n")
                self.console.file.flush()
            self._plain_last = ""
            return
        for block in self._splitter.finish():
            self._commit(block)
        self._open_render = ""
        self._dirty = False
        self.live.redraw()

    def discard(self) -> None:
        """Drop the open block without printing it (the step is being retried)."""
        self._splitter = BlockSplitter()
        self._open_render = ""
        self._dirty = False
        if self.live is not None:
            self.live.redraw()
        elif self._plain_last and self._plain_last != "\n":
            self.console.file.write("\n")
            self._plain_last = ""

    @property
    def started(self) -> bool:
        """True once any text was received."""
        return self._blocks > 0 or self._splitter.has_open_block or bool(self._plain_last)

    def _commit(self, block: str) -> bool:
        if not block.strip():
            return False
        assert self.live is not None
        text = render_ansi(self.console, markdown(block))
        if self._blocks:
            text = "\n" + text
        self._blocks += 1
        self._open_render = ""
        self.live.print_above(text)
        return True

    def _render_open(self) -> None:
        self._dirty = False
        source = self._splitter.open_block(max_lines=max(4, self.console.size.height))
        if not source.strip():
            self._open_render = ""
            return
        self.redraws += 1
        text = render_ansi(self.console, markdown(source))
        self._open_render = ("\n" + text) if self._blocks else text


class TextStream:
    """Stream plain text (reasoning) in one style: complete lines go to scrollback, the partial line is live."""

    def __init__(self, console: Console, live: LiveRegion | None, style: str = "dim italic") -> None:
        self.console = console
        self.live = live
        self.style = style
        self._partial = ""
        self._plain_open = False

    def feed(self, text: str) -> None:
        """Add a delta."""
        if not text:
            return
        if self.live is None:
            self.console.file.write(text)
            self.console.file.flush()
            self._plain_open = not text.endswith("\n")
            return
        data = self._partial + text
        if "\n" in data:
            head, self._partial = data.rsplit("\n", 1)
            self.live.print_above(render_ansi(self.console, Text(head, style=self.style)))
        else:
            self._partial = data

    def live_text(self) -> str:
        """The partial line, rendered (only its end when it is very long)."""
        if not self._partial.strip() or self.live is None:
            return ""
        return render_ansi(self.console, Text(self._partial[-2000:], style=self.style))

    def finish(self) -> None:
        """Print the partial line into scrollback."""
        if self.live is None:
            if self._plain_open:
                self.console.file.write("\n")
                self.console.file.flush()
            self._plain_open = False
            return
        if self._partial.strip():
            self.live.print_above(render_ansi(self.console, Text(self._partial, style=self.style)))
        self._partial = ""


@contextlib.contextmanager
def transient_line(console: Console, plain: bool, text: str) -> Iterator[None]:
    """Show `text` on the current line while the block runs, then erase it (nothing in plain mode,
    where a line cannot be taken back)."""
    if plain:
        yield
        return
    out = console.file
    line = Text(text, style="dim")
    line.truncate(max(1, console.size.width - 1), overflow="ellipsis")  # one row: one erase takes it back
    out.write(render_ansi(console, line).rstrip("\n"))
    out.flush()
    try:
        yield
    finally:
        out.write("\r\x1b[2K")
        out.flush()
