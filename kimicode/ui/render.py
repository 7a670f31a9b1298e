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
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.markdown import ListElement, Markdown, MarkdownElement
from rich.text import Text

from kimicode.ui.live import LiveRegion, live_width

__all__ = ["BlockSplitter", "LiveRegion", "MarkdownStream", "TextStream", "markdown", "render_ansi", "transient_line"]

CODE_THEME = "monokai"

_FENCE_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_LIST_ITEM = re.compile(r"^ {0,3}([-+*]|\d{1,9}([.)]))(?:[ \t]|$)")
_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")

def render_ansi(console: Console, renderable: RenderableType) -> str:
    """Render to the console's escape-coded text (colours as the console would print them)."""
    with console.capture() as capture:
        console.print(renderable)
    return capture.get()


class _OrderedList(ListElement):
    """rich's list, except that an ordered list printed in pieces numbers its column as the whole list would.

    `Markdown.fragment_last` (read once, by the outermost list) is the `last_number` rich would compute for
    the whole list (its start plus its number of items): it sets the width of the number column.
    """

    last = 0

    @classmethod
    def create(cls, markdown: Markdown, token: Any) -> ListElement:
        element = cls(token.type, int(token.attrs.get("start", 1)))
        element.last = getattr(markdown, "fragment_last", 0)
        if element.last:
            markdown.fragment_last = 0  # type: ignore[attr-defined]
        return element

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.list_type == "bullet_list_open" or not self.last:
            yield from super().__rich_console__(console, options)
            return
        number = 1 if self.list_start is None else self.list_start
        for index, item in enumerate(self.items):
            yield from item.render_number(console, options, number + index, self.last)


class _Markdown(Markdown):
    """rich's Markdown with `_OrderedList`."""

    elements: ClassVar[dict[str, type[MarkdownElement]]] = {**Markdown.elements, "ordered_list_open": _OrderedList}
    fragment_last = 0


_PROTOTYPE: _Markdown | None = None
_PARSER: Any = None


def markdown(source: str, fragment_last: int = 0) -> Markdown:
    """The Markdown renderable used everywhere in the UI (no OSC-8 hyperlinks: they garble some terminals).

    `rich.markdown.Markdown` builds a new markdown-it parser per instance, a tenth of the cost of a small
    render; here one parser is reused and the instance is a copy of a prototype with the new source.
    `fragment_last`: `source` is a piece of an ordered list whose whole would end at that `last_number`.
    """
    global _PROTOTYPE, _PARSER
    if _PROTOTYPE is None:
        _PROTOTYPE = _Markdown("", code_theme=CODE_THEME, hyperlinks=False)
        try:
            from markdown_it import MarkdownIt

            _PARSER = MarkdownIt().enable("strikethrough").enable("table")
        except ImportError:  # pragma: no cover - markdown-it is a dependency of rich
            _PARSER = None
    if _PARSER is None or not hasattr(_PROTOTYPE, "parsed"):
        md = _Markdown(source, code_theme=CODE_THEME, hyperlinks=False)
    else:
        md = copy.copy(_PROTOTYPE)
        md.markup = source
        md.parsed = _PARSER.parse(source)
    md.fragment_last = fragment_last
    return md


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


class MarkdownStream:
    """Render one streamed Markdown answer.

    With a `LiveRegion`, finished blocks are printed once into scrollback, and so are the finished items
    of a list still being written (each item renders the same alone as within its list); what is not
    finished yet is offered through `live_text()` as one short row, the end of the line being written (the
    region's content callback shows it), refreshed at most every `min_interval` seconds of `clock`. The
    live region thus stays a few short rows, which a resize cannot garble. Without a region (plain
    output) the text is written through as is.
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
        self._done_lines = 0
        """Lines of the open block already printed (finished list items)."""
        self._done_items = 0
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
        committed = self._commit_items() or committed
        self._dirty = True
        self.refresh(force=committed)

    def refresh(self, force: bool = False, draw: bool = True) -> None:
        """Re-render the open block's live row if it changed and `min_interval` has passed (or `force`).

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
        self._done_lines = self._done_items = 0
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
        """Print a finished block (only its lines not printed yet, when it is a list printed item by item)."""
        done, self._done_lines = self._done_lines, 0
        items, self._done_items = self._done_items, 0
        if done:
            lines = block.split("\n")
            if not "".join(lines[done:]).strip():
                return False
            return self._print_part(lines, done, len(lines), items, len(_list_items(lines)[0]))
        if not block.strip():
            return False
        return self._print(render_ansi(self.console, markdown(block)), first=True)

    def _print(self, text: str, first: bool) -> bool:
        assert self.live is not None
        if first:
            if self._blocks:
                text = "\n" + text
            self._blocks += 1
        else:  # a later piece of a list: rich puts a blank line before any list
            rows = text.split("\n")
            while rows and not _ANSI_CODE.sub("", rows[0]).strip():
                rows.pop(0)
            text = "\n".join(rows)
        self._open_render = ""
        self.live.print_above(text)
        return True

    def _print_part(self, lines: list[str], start: int, end: int, items_before: int, total_items: int) -> bool:
        """Print lines `start:end` of a list (whole items), numbered as in the whole list."""
        part = lines[start:end]
        while part and not part[0].strip():
            part.pop(0)  # the blank line after the previous item (held back until the list went on)
        last = 0
        number = _ORDERED_START.match(lines[0])
        if number is not None:
            first = int(number.group(2))
            part[0] = _ORDERED_START.sub(lambda m: m.group(1) + str(first + items_before), part[0], count=1)
            last = first + total_items
        text = render_ansi(self.console, markdown("\n".join(part), fragment_last=last))
        return self._print(text, first=start == 0)

    def _commit_items(self) -> bool:
        """Print the finished items of the open block when it is a list (the last item may still grow)."""
        lines, partial = self._splitter.open_lines()
        starts, ongoing = _list_items(lines, partial)
        if len(starts) + ongoing < 2:
            return False
        end = len(lines) if ongoing else starts[-1]
        if not "".join(lines[self._done_lines : end]).strip():
            return False
        total = len(starts) + ongoing
        number = _ORDERED_START.match(lines[0])
        if number is not None and int(number.group(2)) + total < 10:
            return False  # the number column may still widen (rich sizes it to the whole list)
        items = sum(1 for s in starts if self._done_lines <= s < end)
        self._print_part(lines, self._done_lines, end, self._done_items, total)
        self._done_lines = end
        self._done_items += items
        return True

    def _render_open(self) -> None:
        self._dirty = False
        lines, partial = self._splitter.open_lines()
        rest = "\n".join([*lines[self._done_lines :], partial])
        if not rest.strip():
            self._open_render = ""
            return
        self.redraws += 1
        row = ticker(self.console, rest)
        self._open_render = ("\n" + row) if self._blocks and not self._done_lines else row


_ANSI_CODE = re.compile(r"\x1b\[[0-9;]*m")
_RULE = re.compile(r"^ {0,3}([-*_])(?: *\1){2,} *$")
_ORDERED_START = re.compile(r"^( {0,3})(\d{1,9})(?=[.)])")


def _list_items(lines: list[str], partial: str = "") -> tuple[list[int], int]:
    """Where the top-level items of a list block start (line indexes), and 1 when `partial` (the line
    being written) already starts another item, else 0. Lines inside a code fence never start one; a line
    that ends the list (another kind of item, a heading, a rule, a fence) stops the count there."""
    first = _LIST_ITEM.match(lines[0]) if lines else None
    if first is None:
        return [], 0
    kind = _list_kind(first)
    offset = len(first.group(0))

    def top(line: str) -> bool:
        return len(line) - len(line.lstrip(" ")) < offset

    def starts_item(line: str) -> bool:
        item = _LIST_ITEM.match(line)
        return item is not None and top(line) and _list_kind(item) == kind and not _RULE.match(line)

    def ends_list(line: str) -> bool:
        return top(line) and bool(_LIST_ITEM.match(line) or _HEADING.match(line) or _FENCE_OPEN.match(line))

    starts: list[int] = []
    fence: str | None = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = None
            continue
        if starts_item(line):
            starts.append(i)
        elif ends_list(line) or _RULE.match(line):
            return starts, 0
        opened = _FENCE_OPEN.match(stripped)
        if opened:
            fence = opened.group(2)
    item = _LIST_ITEM.match(partial) if fence is None and starts_item(partial) else None
    return starts, int(item is not None and bool(partial[item.end() :].strip()))


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
