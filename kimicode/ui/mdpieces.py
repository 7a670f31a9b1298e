"""Markdown printed in pieces while it streams, looking exactly as if each block were printed whole.

`markdown()` is the renderable used everywhere in the UI. A list is printed item by item (rich renders
each item on its own; an ordered list's number column is given the width of the whole list's) and a
fenced code block line by line (the code written so far is highlighted, and only the new lines are
printed). `list_items()` and `code_ready()` tell which lines of an unfinished block are final.
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Any, ClassVar

from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import CodeBlock, ListElement, ListItem, Markdown, MarkdownElement
from rich.segment import Segment
from rich.syntax import Syntax

CODE_THEME = "monokai"
CODE_PADDING = (0, 1)
"""A code block's padding: a column each side, no rows (the blank line between blocks is enough)."""

FENCE_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
LIST_ITEM = re.compile(r"^ {0,3}([-+*]|\d{1,9}([.)]))(?:[ \t]|$)")
HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")
RULE = re.compile(r"^ {0,3}([-*_])(?: *\1){2,} *$")
ORDERED_START = re.compile(r"^( {0,3})(\d{1,9})(?=[.)])")


def list_items(lines: list[str], partial: str = "", start: int = 0) -> tuple[list[int], int]:
    """Where the top-level items of a list block start (line indexes, from line `start`, which must begin
    an item or the block), and 1 when `partial` (the line being written) already starts another item,
    else 0. Lines inside a code fence never start one; a line that ends the list (another kind of item, a
    heading, a rule, a fence) stops the count there."""
    first = LIST_ITEM.match(lines[0]) if lines else None
    if first is None:
        return [], 0
    kind = list_kind(first)
    offset = len(first.group(0))

    def top(line: str) -> bool:
        return len(line) - len(line.lstrip(" ")) < offset

    def starts_item(line: str) -> bool:
        item = LIST_ITEM.match(line)
        return item is not None and top(line) and list_kind(item) == kind and not RULE.match(line)

    def ends_list(line: str) -> bool:
        return top(line) and bool(LIST_ITEM.match(line) or HEADING.match(line) or FENCE_OPEN.match(line))

    starts: list[int] = []
    fence: str | None = None
    for i in range(start, len(lines)):
        line = lines[i]
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = None
            continue
        if starts_item(line):
            starts.append(i)
        elif ends_list(line) or RULE.match(line):
            return starts, 0
        opened = FENCE_OPEN.match(stripped)
        if opened:
            fence = opened.group(2)
    item = LIST_ITEM.match(partial) if fence is None and starts_item(partial) else None
    return starts, int(item is not None and bool(partial[item.end() :].strip()))


CODE_CONTEXT = 200
"""Lines before the new ones highlighted with them when a code block is printed in pieces (all of them
would make a long block quadratic; a construct opened further up is rare)."""


def code_piece(lines: list[str], first: int, last: int) -> tuple[str, int, int]:
    """The source to render for lines `first..last` (indexes) of an open code block, and where they are
    in it: the fence line and at most `CODE_CONTEXT` lines before them."""
    skip = max(0, first - 1 - CODE_CONTEXT)
    return "\n".join([lines[0], *lines[1 + skip : last + 1]]), first - skip, last - skip


def code_ready(lines: list[str]) -> int:
    """In a block that opens with a code fence (and is still open), the index of the last complete line
    that is final (0: none yet): blank lines at the end wait for a line after them (rich drops trailing
    blank lines of a code block)."""
    if not lines or not FENCE_OPEN.match(lines[0]):
        return 0
    end = len(lines) - 1
    while end > 0 and not lines[end].strip():
        end -= 1
    return end


def list_kind(item: re.Match[str] | None) -> str:
    """`-`, `+`, `*`, or `.`/`)` for ordered lists: items of another kind start a new list."""
    if item is None:
        return ""
    return item.group(2) or item.group(1)


class _OrderedList(ListElement):
    """rich's list, except that an ordered list printed in pieces numbers its column as the whole list would.

    `Markdown.fragment_last` (read once, by the outermost list) is the `last_number` rich would compute for
    the whole list (its start plus its number of items): it sets the width of the number column.
    """

    last = 0
    delimiter = "."

    @classmethod
    def create(cls, markdown: Markdown, token: Any) -> ListElement:
        element = cls(token.type, int(token.attrs.get("start", 1)))
        element.last = getattr(markdown, "fragment_last", 0)
        element.delimiter = token.markup if token.markup in (".", ")") else "."
        if element.last:
            markdown.fragment_last = 0  # type: ignore[attr-defined]
        return element

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.list_type == "bullet_list_open":
            yield from super().__rich_console__(console, options)
            return
        number = 1 if self.list_start is None else self.list_start
        last = self.last or number + len(self.items)
        for index, item in enumerate(self.items):
            yield from _render_number(item, console, options, number + index, last, self.delimiter)


def _render_number(
    item: ListItem, console: Console, options: ConsoleOptions, number: int, last: int, delimiter: str
) -> RenderResult:
    """rich's numbered item with the number's `1.` (or `1)`) kept: rich prints a bare `1`."""
    width = len(str(last)) + 3
    lines = console.render_lines(item.elements, options.update(width=options.max_width - width), style=item.style)
    style = console.get_style("markdown.item.number", default="none")
    numeral = Segment(f"{number}{delimiter}".rjust(width - 1) + " ", style)
    padding = Segment(" " * width, style)
    for index, line in enumerate(lines):
        yield padding if index else numeral
        yield from line
        yield Segment("\n")


class _CodeBlock(CodeBlock):
    """rich's code block, except that a block printed in pieces shows only some of its lines.

    `Markdown.code_lines` (read once) is `(first, last, top, bottom)`: the lines to show (1-based, `last`
    None for the end), and whether to add the padding row above and the one below. The whole code is
    still highlighted, so the lines look as they do in the whole block.
    """

    lines: tuple[int, int | None, bool, bool] | None = None

    @classmethod
    def create(cls, markdown: Markdown, token: Any) -> CodeBlock:
        element = super().create(markdown, token)
        assert isinstance(element, _CodeBlock)
        element.lines = getattr(markdown, "code_lines", None)
        if element.lines is not None:
            markdown.code_lines = None  # type: ignore[attr-defined]
        return element

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        code = str(self.text).rstrip()
        lexer = _lexer(self.lexer_name) or self.lexer_name
        if self.lines is None:
            yield Syntax(code, lexer, theme=self.theme, word_wrap=True, padding=CODE_PADDING)
            return
        first, last, _top, _bottom = self.lines
        yield Syntax(code, lexer, theme=self.theme, word_wrap=True, padding=CODE_PADDING, line_range=(first, last))


@functools.lru_cache(maxsize=64)
def _lexer(name: str) -> Any:
    """The Pygments lexer rich's Syntax looks up by `name`, or None (looking it up each time costs more
    than highlighting a short piece)."""
    return Syntax("", name).lexer


class _Markdown(Markdown):
    """rich's Markdown with `_OrderedList` and `_CodeBlock`."""

    elements: ClassVar[dict[str, type[MarkdownElement]]] = {
        **Markdown.elements,
        "ordered_list_open": _OrderedList,
        "fence": _CodeBlock,
        "code_block": _CodeBlock,
    }
    fragment_last = 0
    code_lines: tuple[int, int | None, bool, bool] | None = None


_PROTOTYPE: _Markdown | None = None
_PARSER: Any = None


def markdown(
    source: str, fragment_last: int = 0, code_lines: tuple[int, int | None, bool, bool] | None = None
) -> Markdown:
    """The Markdown renderable used everywhere in the UI (no OSC-8 hyperlinks: they garble some terminals).

    `rich.markdown.Markdown` builds a new markdown-it parser per instance, a tenth of the cost of a small
    render; here one parser is reused and the instance is a copy of a prototype with the new source.
    `fragment_last`: `source` is a piece of an ordered list whose whole would end at that `last_number`;
    `code_lines`: `source` is a code block of which only these lines are shown (see `_CodeBlock`).
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
    md.code_lines = code_lines
    return md
