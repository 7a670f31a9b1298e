"""Streaming Markdown for the terminal: what is final goes to scrollback once; only one short row is live.

`BlockSplitter` cuts a stream of Markdown text into top-level blocks (paragraphs, fenced code, lists,
tables, headings) as soon as each is known to be complete. `LiveRegion` (kimicode.ui.live) owns the few
short rows at the bottom of the terminal that are redrawn in place; everything above it is ordinary
scrollback, written once. `MarkdownStream` joins the two: each delta costs a scan of the new text; a
finished block is rendered once with `rich.markdown.Markdown`, and so are, as soon as they are final, the
items of a list, the lines of a code block and the rows of a plain paragraph still being written
(kimicode.ui.mdpieces prints them so that they look as in the whole block). Of the rest (the last row of
a paragraph, a paragraph with inline markup or a table being written, the last item) the live region
shows one row: the end of the line being written. Nothing that may grow taller or wider is ever redrawn,
so resizing the window cannot leave copies of it.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator

from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.text import Text

from kimicode.ui.live import LiveRegion, live_width
from kimicode.ui.mdpieces import (
    CODE_THEME,
    FENCE_OPEN,
    HEADING,
    LIST_ITEM,
    ORDERED_START,
    code_piece,
    code_ready,
    list_items,
    list_kind,
    markdown,
)

__all__ = [
    "CODE_THEME",
    "BlockSplitter",
    "LiveRegion",
    "MarkdownStream",
    "TextStream",
    "markdown",
    "render_ansi",
    "ticker",
    "transient_line",
    "trim_blank_rows",
]


def render_ansi(console: Console, renderable: RenderableType) -> str:
    """Render to the console's escape-coded text (colours as the console would print them)."""
    with console.capture() as capture:
        console.print(renderable)
    return capture.get()


def trim_blank_rows(text: str) -> str:
    """A rendered block without the blank rows rich puts before and after tables and lists."""
    rows = text.split("\n")
    ending = rows.pop() if rows and not rows[-1] else None
    blank = [not _ANSI_CODE.sub("", row).strip() for row in rows]
    if all(blank):
        return text
    first = blank.index(False)
    last = len(rows) - blank[::-1].index(False)
    kept = rows[first:last]
    if ending is not None:
        kept.append(ending)
    return "\n".join(kept)


def ticker(console: Console, text: str, style: str = "dim") -> str:
    """One short live row: the end of the last non-empty line of `text`, at most `live_width` cells."""
    line = next((row for row in reversed(text.splitlines()) if row.strip()), "").strip()
    if not line:
        return ""
    cap = live_width(console.size.width)
    if cell_len(line) > cap:
        cut, cells = len(line), 1
        while cut > 0 and cells + cell_len(line[cut - 1]) <= cap:
            cut -= 1
            cells += cell_len(line[cut])
        line = "…" + line[cut:]
    return render_ansi(console, Text(line, style=style))


class BlockSplitter:
    """Split streamed Markdown into complete top-level blocks.

    `feed()` returns the blocks completed by the new text; `open_lines()` are the lines of the block still
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

    def open_lines(self) -> tuple[list[str], str]:
        """The complete lines of the block being written, and its partial last line."""
        return self._lines, self._partial

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
        fence = FENCE_OPEN.match(line)
        if fence and not (fence.group(2)[0] == "`" and "`" in fence.group(3)):
            if self._lines and not self._in_list():
                self._emit(done)  # a fence interrupts a paragraph: it starts a block of its own
            self._fence = (fence.group(2)[0], len(fence.group(2)))
            self._fence_top = not self._lines
            self._lines.append(line)
            return
        if HEADING.match(line) and not self._in_list():
            self._emit(done)
            self._lines.append(line)
            self._emit(done)
            return
        self._lines.append(line)

    def _in_list(self) -> bool:
        return bool(self._lines) and bool(LIST_ITEM.match(self._lines[0]))

    def _ends_list(self, partial: str) -> bool:
        """After a list and a blank line, does the start of the next line already show the list is over?"""
        if partial[0] in " \t":
            return False
        item = LIST_ITEM.match(partial)
        if item is not None:
            return list_kind(item) != list_kind(LIST_ITEM.match(self._lines[0]))
        # not (yet) an item: decided once it can no longer become one ("12345678901. " is the longest)
        return not re.match(r"^(?:[-+*]|\d{1,9}[.)]?)$", partial)

    def _continues_list(self, line: str) -> bool:
        """After a blank line, an indented line or another item of the same kind keeps a list going."""
        if not self._in_list():
            return False
        if line.startswith((" ", "\t")):
            return True
        item = LIST_ITEM.match(line)
        return item is not None and list_kind(item) == list_kind(LIST_ITEM.match(self._lines[0]))


class MarkdownStream:
    """Render one streamed Markdown answer.

    With a `LiveRegion`, finished blocks are printed once into scrollback, and so are the finished items
    of a list and the complete lines of a code block still being written (kimicode.ui.mdpieces renders
    them as within the whole block); what is not finished yet is offered through `live_text()` as one
    short row, the end of the line being written (the region's content callback shows it), refreshed at
    most every `min_interval` seconds of `clock`. The live region thus stays a few short rows, which a
    resize cannot garble. Without a region (plain output) the text is written through as is.
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
        self._last_code = float("-inf")
        self._code_held = False
        """Complete code lines wait for the redraw clock: each piece highlights its block from the fence."""
        self._open_render = ""
        self._plain_last = ""
        self._done_lines = 0
        """Lines of the open block already printed (finished list items, complete code lines)."""
        self._done_items = 0
        self._done_chars = 0
        """Characters of the open block already printed (the rows of a plain paragraph that are final)."""
        self._not_plain = False
        """The open block is known not to be a plain paragraph."""
        self.redraws = 0
        """How many times the live row of the open block was rendered (reported by the benchmark)."""

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
        committed = self._commit_ready() or committed
        if not committed:  # else the live row was drawn with what was printed
            self._dirty = True
            self.refresh()

    def refresh(self, force: bool = False, draw: bool = True) -> None:
        """Re-render the open block's live row if it changed and `min_interval` has passed (or `force`).

        The live region is redrawn unless `draw` is false (the caller redraws it anyway).
        """
        if self.live is None or not (self._dirty or self._code_held):
            return
        now = self.clock()
        if self._code_held and (force or now - self._last_code >= self.min_interval):
            self._code_held = False
            if self._commit_ready():
                return  # printed with the live row
        if not self._dirty:
            return
        if force or now - self._last_draw >= self.min_interval:
            self._render_open()
            self._last_draw = now
            if draw:
                self.live.redraw()

    def live_text(self) -> str:
        """The live row of the open block (empty when there is none)."""
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
        self._done_lines = self._done_items = self._done_chars = 0
        self._not_plain = False
        self._code_held = False
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
        """Print a finished block (only its lines not printed yet, when it was printed in pieces)."""
        done, self._done_lines = self._done_lines, 0
        self._code_held = False
        items, self._done_items = self._done_items, 0
        chars, self._done_chars = self._done_chars, 0
        self._not_plain = False
        if chars:
            rest = block[chars:]
            return bool(rest.strip()) and self._print(render_ansi(self.console, markdown(rest)), first=False)
        if done:
            lines = block.split("\n")
            if FENCE_OPEN.match(lines[0]):
                source, first, _last = code_piece(lines, done, len(lines) - 1)
                piece = markdown(source, code_lines=(first, None, False, True))
                return self._print(render_ansi(self.console, piece), first=False)
            if not "".join(lines[done:]).strip():
                return False
            return self._print_part(lines, done, len(lines), items, len(list_items(lines)[0]))
        if not block.strip():
            return False
        return self._print(render_ansi(self.console, markdown(block)), first=True)

    def _print(self, text: str, first: bool, list_piece: bool = False) -> bool:
        assert self.live is not None
        if first:
            text = trim_blank_rows(text)  # rich's rows around tables and lists: one blank line between blocks
            if self._blocks:
                text = "\n" + text
            self._blocks += 1
        elif list_piece:  # a later piece of a list: rich puts a blank line before any list
            rows = text.split("\n")
            while rows and not _ANSI_CODE.sub("", rows[0]).strip():
                rows.pop(0)
            text = "\n".join(rows)
        self._render_open()  # the live row as it is after this piece: drawn in the same write
        self._last_draw = self.clock()
        self.live.print_above(text)
        return True

    def _print_part(self, lines: list[str], start: int, end: int, items_before: int, total_items: int) -> bool:
        """Print lines `start:end` of a list (whole items), numbered as in the whole list."""
        part = lines[start:end]
        while part and not part[0].strip():
            part.pop(0)  # the blank line after the previous item (held back until the list went on)
        last = 0
        number = ORDERED_START.match(lines[0])
        if number is not None:
            first = int(number.group(2))
            part[0] = ORDERED_START.sub(lambda m: m.group(1) + str(first + items_before), part[0], count=1)
            last = first + total_items
        text = render_ansi(self.console, markdown("\n".join(part), fragment_last=last))
        return self._print(text, first=start == 0, list_piece=True)

    def _commit_ready(self) -> bool:
        """Print the final lines of the open block: the finished items of a list (the last item may still
        grow), the complete lines of a code block (blank ones at its end wait for what follows).

        An ordered list is printed in pieces once it has 9 items (from then on its number column keeps
        its width until the 99th; a list that grows past that has its first 98 numbers one column
        narrower than rich would print them in the whole list)."""
        lines, partial = self._splitter.open_lines()
        if self._commit_rows(lines, partial):
            return True
        code = code_ready(lines)
        if code:
            if code < max(1, self._done_lines):
                return False
            start = max(1, self._done_lines)
            if start > 1 and self.clock() - self._last_code < self.min_interval:
                self._code_held = True  # printed by the next refresh or feed once the interval has passed
                return False
            self._code_held = False
            self._last_code = self.clock()
            source, first, last = code_piece(lines, start, code)
            piece = markdown(source, code_lines=(first, last, start == 1, False))
            self._print(render_ansi(self.console, piece), first=start == 1)
            self._done_lines = code + 1
            return True
        starts, ongoing = list_items(lines, partial, self._done_lines)
        total = self._done_items + len(starts) + ongoing
        if total < 2 or not starts:
            return False
        end = len(lines) if ongoing else starts[-1]
        if not "".join(lines[self._done_lines : end]).strip():
            return False
        number = ORDERED_START.match(lines[0])
        if number is not None and int(number.group(2)) + total < 10:
            return False  # the number column may still widen (rich sizes it to the whole list)
        items = sum(1 for s in starts if self._done_lines <= s < end)
        self._print_part(lines, self._done_lines, end, self._done_items, total)
        self._done_lines = end
        self._done_items += items
        return True

    def _commit_rows(self, lines: list[str], partial: str) -> bool:
        """Print the rows of a plain paragraph being written that are final: all but the last one.

        Greedy wrapping makes a row final once a word follows it, and it starts afresh at each row, so
        the rest of the paragraph, wrapped on its own, continues it exactly. Only for text without any
        character that Markdown could give a meaning to later (emphasis, code, links, escapes, entities,
        a table, a setext underline) and without words too long to fit a row.
        """
        if self._not_plain or (lines and (FENCE_OPEN.match(lines[0]) or LIST_ITEM.match(lines[0]))):
            return False
        source = "\n".join([*lines, partial]) if lines else partial
        width = self.console.size.width
        rest = source[self._done_chars :]
        if len(rest) <= width:
            return False
        if not _plain_paragraph(source, width):
            self._not_plain = True  # markup stays: no need to look again in this block
            return False
        rows = render_ansi(self.console, markdown(rest)).rstrip("\n").split("\n")
        if len(rows) < 2:
            return False
        final = rows[:-1]
        words = sum(len(_ANSI_CODE.sub("", row).split()) for row in final)
        end = _word_end(rest, words)
        self._print("\n".join(final) + "\n", first=self._done_chars == 0)
        self._done_chars += end
        return True

    def _render_open(self) -> None:
        self._dirty = False
        lines, partial = self._splitter.open_lines()
        rest = "\n".join([*lines[self._done_lines :], partial])
        if self._done_chars:
            rest = ("\n".join([*lines, partial]) if lines else partial)[self._done_chars :]
        if not rest.strip():  # all printed but the block goes on: its last line keeps the row (no jump)
            rest = "\n".join(lines[-1:]) if self._splitter.has_open_block else ""
        if not rest.strip():
            self._open_render = ""
            return
        self.redraws += 1
        row = ticker(self.console, rest)
        self._open_render = ("\n" + row) if self._blocks and not (self._done_lines or self._done_chars) else row


_ANSI_CODE = re.compile(r"\x1b\[[0-9;]*m")
_MARKUP = re.compile(r"[*_`\[\]<>\\&~!|#=]|^ {0,3}(?:[-+>]|\d+[.)])|^ {4}| {2}$|^\s*$", re.M)
"""Anything Markdown could give a meaning to (or a line break, or a blank line) in a paragraph's text."""


def _plain_paragraph(source: str, width: int) -> bool:
    """Text a paragraph renders word for word, wrapped greedily (see `MarkdownStream._commit_rows`)."""
    if _MARKUP.search(source):
        return False
    return all(len(word) < width // 2 for word in source.split())


def _word_end(text: str, words: int) -> int:
    """The offset in `text` just after its first `words` words and the whitespace after them."""
    end = 0
    for n, match in enumerate(re.finditer(r"\S+\s*", text)):
        if n == words:
            break
        end = match.end()
    return end


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
        """The end of the partial line, one short row."""
        if not self._partial.strip() or self.live is None:
            return ""
        return ticker(self.console, self._partial[-2000:], self.style)

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
    where a line cannot be taken back). It is a one-row live region: short, so a resize meanwhile
    cannot leave it behind."""
    if plain:
        yield
        return
    line = Text(text, style="dim")
    row = LiveRegion(console.file, lambda: console.size.height, lambda: [render_ansi(console, line)], console=console)
    row.redraw()
    try:
        yield
    finally:
        row.clear()
