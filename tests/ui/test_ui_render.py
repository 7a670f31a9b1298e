"""The streaming Markdown renderer: block splitting, scrollback written once, the live region, plain mode."""

from __future__ import annotations

import io
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from terminals import Term, stream_into

from kimicode.ui.live import live_width, trim_rows
from kimicode.ui.render import (
    BlockSplitter,
    LiveRegion,
    MarkdownStream,
    TextStream,
    markdown,
    render_ansi,
    trim_blank_rows,
)

DOC = """# Title

A first paragraph with **bold** and `code`
that spans two source lines.

```python
def f(x):

    return x  # a blank line inside the fence does not split it
```

- one
- two

- three, after a blank line: still the same list
  continued, indented

1. first
2. second

| a | b |
|---|---|
| 1 | 2 |

Closing words."""


def split_all(text: str, sizes: list[int]) -> list[str]:
    splitter = BlockSplitter()
    blocks: list[str] = []
    i = 0
    k = 0
    while i < len(text):
        n = sizes[k % len(sizes)]
        blocks += splitter.feed(text[i : i + n])
        i += n
        k += 1
    return blocks + splitter.finish()


def test_blocks_of_a_document() -> None:
    blocks = split_all(DOC, [len(DOC)])
    assert blocks[0] == "# Title"
    assert blocks[1].startswith("A first paragraph") and blocks[1].endswith("two source lines.")
    assert blocks[2].startswith("```python") and blocks[2].endswith("```") and "\n\n" in blocks[2]
    assert blocks[3] == "- one\n- two\n\n- three, after a blank line: still the same list\n  continued, indented"
    assert blocks[4] == "1. first\n2. second"
    assert blocks[5].startswith("| a | b |")
    assert blocks[6] == "Closing words."
    assert len(blocks) == 7


@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=20))
@settings(max_examples=60, deadline=None)
def test_splitting_does_not_depend_on_delta_sizes(sizes: list[int]) -> None:
    assert split_all(DOC, sizes) == split_all(DOC, [len(DOC)])


def test_blocks_complete_as_soon_as_known() -> None:
    s = BlockSplitter()
    assert s.feed("# Head") == []
    assert s.feed("ing\nSome text") == ["# Heading"]  # a heading ends at its newline
    assert s.feed(" more\n\n") == ["Some text more"]  # a paragraph ends at a blank line
    assert s.feed("```\ncode\n") == []
    assert s.open_lines() == (["```", "code"], "")
    assert s.feed("```\n") == ["```\ncode\n```"]  # a closing top-level fence ends the block at once
    assert not s.has_open_block


def test_a_list_ends_when_the_next_line_shows_it() -> None:
    s = BlockSplitter()
    assert s.feed("- a\n- b\n\n") == []  # a blank line: the list may go on
    assert s.feed("-") == []  # could still be another item
    assert s.feed(" c\n\n  indented\n\n1") == []  # same list; then "1" could start "1. item"
    assert s.feed("2") == []
    assert s.feed("3 is a number") == ["- a\n- b\n\n- c\n\n  indented"]  # not an item: the list is over
    assert s.finish() == ["123 is a number"]
    t = BlockSplitter()
    assert t.feed("1. x\n\n- y") == ["1. x"]  # another kind of list starts a new block


def test_fence_interrupting_a_paragraph_and_tilde_fences() -> None:
    assert split_all("text\n~~~\na\n\nb\n~~~\nafter\n", [3]) == ["text", "~~~\na\n\nb\n~~~", "after"]


def reference(text: str, cols: int = 80) -> str:
    """What printing every block once, separated by blank lines, looks like."""
    term = Term(rows=1000, cols=cols)
    for i, block in enumerate(split_all(text, [len(text)])):
        if i:
            term.console.print()
        term.console.file.write(trim_blank_rows(render_ansi(term.console, markdown(block))))
    return term.text


@pytest.mark.parametrize("sizes", [[1], [3, 7, 2], [50]])
def test_streamed_screen_equals_rendering_each_block_once(sizes: list[int]) -> None:
    term = Term()
    md = stream_into(term, DOC, sizes)
    assert md.redraws > 0  # the open block was shown live while it was written
    assert term.text == reference(DOC)
    assert "status line" not in term.text  # the live region was removed


def test_finished_blocks_are_written_once() -> None:
    parts = [f"Paragraph number {i} with unique marker M{i}X." for i in range(30)]
    text = "\n\n".join(parts)
    term = Term()
    # an interval that never elapses: only blocks finished so far and forced redraws of new blocks
    stream_into(term, text, [5], interval=1e9)
    for i in range(30):
        assert term.written.count(f"M{i}X") == 1


def test_live_region_never_exceeds_the_screen() -> None:
    term = Term(rows=12, cols=60)
    md = MarkdownStream(term.console, None, min_interval=0.0)
    region = LiveRegion(term.file, lambda: 12, lambda: [md.live_text()])
    md.live = region
    md.feed("```\n" + "".join(f"row {i}\n" for i in range(40)))
    assert 0 < region.rows <= 10
    assert "row 39" in term.text
    md.finish()
    region.clear()
    assert region.rows == 0


def test_plain_mode_writes_text_through() -> None:
    out = io.StringIO()
    console = Console(file=out, color_system=None, force_terminal=False, width=80)
    md = MarkdownStream(console, None)
    for piece in ["Some **bo", "ld** text", "\n\n- item"]:
        md.feed(piece)
    md.finish()
    assert out.getvalue() == "Some **bold** text\n\n- item\n"
    reasoning = TextStream(console, None)
    reasoning.feed("thinking")
    reasoning.finish()
    assert out.getvalue().endswith("- item\nthinking\n")
    assert "\x1b" not in out.getvalue()


def test_text_stream_commits_lines_and_keeps_the_partial_line_live() -> None:
    term = Term(rows=20)
    ts = TextStream(term.console, None)
    region = LiveRegion(term.file, lambda: 20, lambda: [ts.live_text()])
    ts.live = region
    ts.feed("line one\nline tw")
    assert term.written.count("line one") == 1
    assert ts.live_text() and "line tw" in ts.live_text()
    region.redraw()
    assert "line tw" in term.text
    ts.feed("o\n")
    ts.finish()
    region.clear()
    assert term.text.splitlines() == ["line one", "line two"]


def test_markdown_helper_renders_like_rich() -> None:
    console = Console(file=io.StringIO(), width=70, force_terminal=True, color_system="truecolor")
    from rich.markdown import Markdown

    for source in ("# Title\n\n- one\n- two", "plain", "| x |\n|---|\n| 1 |", "[link](http://example.com)"):
        assert render_ansi(console, markdown(source)) == render_ansi(
            console, Markdown(source, code_theme="monokai", hyperlinks=False)
        )
    # on purpose unlike rich: an ordered list keeps its `1.`, a code block has no padding rows
    plain = Console(file=io.StringIO(), width=70)
    rows = [row.rstrip() for row in render_ansi(plain, markdown("1. first\n2. second\n\n3) other\n")).splitlines()]
    assert [row for row in rows if row] == [" 1. first", " 2. second", " 3) other"]
    assert render_ansi(plain, markdown("```\ncode\n```")).rstrip() == " code"


@pytest.mark.prepush
def test_random_documents_render_identically_when_streamed() -> None:
    rng = random.Random(11)
    pieces = [
        "para **x** y",
        "```\ncode\n\nmore\n```",
        "- a\n- b",
        "1. one\n2. two",
        "| h |\n|---|\n| v |",
        "## Head",
        "> quote",
    ]
    for _ in range(5):
        text = "\n\n".join(rng.choice(pieces) for _ in range(12))
        term = Term()
        stream_into(term, text, [rng.randint(1, 9) for _ in range(5)])
        assert term.text == reference(text)


# -- resize safety (issue 13): short live rows, finished list items printed at once, re-wrap aware erase --


def list_doc(n: int, ordered: bool, rng: random.Random) -> str:
    rows = []
    for i in range(1, n + 1):
        marker = f"{1 if rng.random() < 0.3 else i}." if ordered else rng.choice("-*")
        rows.append(f"{marker} item {i} " + " ".join("word" for _ in range(rng.randint(1, 30))))
        if rng.random() < 0.2:
            rows.append("  continued, indented")
        if rng.random() < 0.15:
            rows.append("")
    return "Intro paragraph.\n\n" + "\n".join(rows) + "\n\nAfter the list."


@pytest.mark.prepush
@pytest.mark.parametrize("n", [3, 8, 9, 12, 30])
@pytest.mark.parametrize("ordered", [False, True])
def test_a_list_printed_item_by_item_looks_like_the_whole_list(n: int, ordered: bool) -> None:
    rng = random.Random(n * 2 + ordered)
    for _ in range(3):
        text = list_doc(n, ordered, rng)
        cols = rng.choice([40, 80, 120])
        term = Term(rows=400, cols=cols)
        stream_into(term, text, [rng.randint(1, 15) for _ in range(7)], interval=1e9)
        assert term.text == reference(text, cols)


def test_a_finished_item_is_in_scrollback_as_soon_as_the_next_one_starts() -> None:
    term = Term(rows=60)
    md = MarkdownStream(term.console, None, min_interval=0.0)
    md.live = LiveRegion(term.file, lambda: 60, lambda: [md.live_text()], console=term.console)
    md.feed("- first item\n- sec")
    assert term.written.count("first item") == 1  # printed, once
    assert "sec" not in term.written.replace(md.live_text(), "")  # the open item is only live
    md.feed("ond item\n- third")
    md.finish()
    md.live.clear()
    assert term.written.count("first item") == 1 and term.written.count("second item") == 1
    assert term.text == reference("- first item\n- second item\n- third")


def test_live_rows_are_short_and_the_open_block_is_one_row() -> None:
    term = Term(rows=40, cols=120)
    md = MarkdownStream(term.console, None, min_interval=0.0)
    md.live = LiveRegion(term.file, lambda: 40, lambda: [md.live_text(), "s" * 300 + "\n"], console=term.console)
    md.feed("A paragraph with `code` that goes on " + "and on " * 80)  # not plain: wholly live
    assert md.live.rows == 2
    rows = [line.rstrip() for line in term.screen.display if line.strip()]
    assert all(len(row) <= live_width(120) for row in rows), rows
    assert rows[0].startswith("…") and rows[0].endswith("and on")  # the end of the line being written
    assert live_width(120) == 40 and live_width(60) == 30 and live_width(20) == 19


def test_the_erase_counts_the_rows_a_narrowing_re_wrapped() -> None:
    out = io.StringIO()
    width = [120]
    region = LiveRegion(out, lambda: 40, lambda: ["x" * 35 + "\n", "\n", "y" * 10 + "\n"], width=lambda: width[0])
    region.redraw()
    assert region.rows == 3
    out.truncate(0)
    out.seek(0)
    region.redraw()
    assert out.getvalue().startswith("\r\x1b[3A\x1b[J")  # same width: one row each
    width[0] = 20  # a terminal that re-wraps: the 35-cell row now takes two
    out.truncate(0)
    out.seek(0)
    region.clear()
    assert out.getvalue().startswith("\r\x1b[4A\x1b[J")


def test_padding_is_trimmed_from_scrollback_rows_unless_it_paints() -> None:
    assert trim_rows("a   \n") == "a\n"
    assert trim_rows("\x1b[35mq\x1b[0m\x1b[35m    \x1b[0m\n") == "\x1b[35mq\x1b[0m\n"
    painted = "\x1b[48;2;1;2;3m  x   \x1b[0m\n"  # a code block's background
    assert trim_rows(painted) == painted
    assert trim_rows("\x1b[1;36;40mcode\x1b[0m x   ") == "\x1b[1;36;40mcode\x1b[0m x"


def code_doc(rng: random.Random) -> str:
    lines = []
    for i in range(rng.randint(1, 25)):
        kind = rng.random()
        if kind < 0.15:
            lines.append("")
        elif kind < 0.25:
            lines.append('    text = """a string')
            lines.append('    still the string"""')
        else:
            indent = "    " * rng.randint(0, 2)
            comment = "c" * rng.randint(0, 60)
            lines.append(f"{indent}value_{i} = compute({i}, 'x' * {rng.randint(1, 90)})  # {comment}")
    trailing = "\n" * rng.randint(0, 2)
    closing = "```" if rng.random() < 0.8 else ""  # an answer may end inside a fence
    return "Before.\n\n```" + rng.choice(["python", "", "text"]) + "\n" + "\n".join(lines) + trailing + "\n" + closing


@pytest.mark.prepush
@pytest.mark.parametrize("seed", range(6))
def test_a_code_block_printed_line_by_line_looks_like_the_whole_block(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(4):
        text = code_doc(rng) + ("\n\nAfter." if rng.random() < 0.7 else "")
        cols = rng.choice([40, 80, 120])
        term = Term(rows=400, cols=cols)
        stream_into(term, text, [rng.randint(1, 20) for _ in range(7)], interval=1e9)
        assert term.text == reference(text, cols), text


def test_code_lines_reach_the_scrollback_while_the_block_is_written() -> None:
    term = Term(rows=60)
    md = MarkdownStream(term.console, None, min_interval=0.0)
    md.live = LiveRegion(term.file, lambda: 60, lambda: [md.live_text()], console=term.console)
    md.feed("```python\nfirst = 1\nsecond = 2\n\nthird")
    assert "first" in term.written and "second" in term.written  # complete lines: printed
    assert "third" in md.live_text() and "third" not in term.written.replace(md.live_text(), "")
    assert term.written.count("second") == 1
    md.feed(" = 3\n")
    assert "third" in term.written.replace(md.live_text(), "")


@pytest.mark.prepush
def test_a_long_code_block_in_pieces_highlights_a_window_and_still_matches() -> None:
    body = "\n".join(f"line_{i} = {i} * 2  # comment {i}" for i in range(450))
    text = f"```python\n{body}\n```\n\nAfter."
    term = Term(rows=1000, cols=80)
    stream_into(term, text, [37, 80, 5], interval=1e9)
    assert term.text == reference(text, 80)


def test_the_typed_input_and_the_status_line_fit_a_live_row() -> None:
    from kimicode.ui.typeahead import input_footer
    from kimicode.ui.view import TurnView

    short = input_footer([], "fix it", 50)
    assert short is not None and short.plain == "› fix it  (enter queues it, ctrl-s sends it now)"
    long = input_footer(["a queued message that is long"], "x" * 60 + "END", 30)
    assert long is not None
    rows = long.plain.splitlines()
    assert all(len(row) <= 30 for row in rows) and rows[-1].endswith("END")  # the end of what is typed
    term = Term(rows=30, cols=120)
    view = TurnView(term.console, plain=False, show_reasoning=True)
    view.start()
    status = [row.rstrip() for row in term.screen.display if row.strip()]
    assert status and "esc to interrupt" in status[-1] and len(status[-1]) <= live_width(120)
    narrow = Term(rows=30, cols=60)
    view = TurnView(narrow.console, plain=False, show_reasoning=True)
    view.start()
    row = next(row.rstrip() for row in narrow.screen.display if row.strip())
    assert len(row) <= live_width(60) and "waiting for the model" in row


@pytest.mark.prepush
@pytest.mark.parametrize("seed", range(8))
def test_a_plain_paragraph_is_printed_row_by_row_and_looks_the_same(seed: int) -> None:
    rng = random.Random(seed)
    words = ["a", "terminal", "agent", "reads", "files,", "runs", "tests", "and", "edits", "code.", "Then", "it"]
    for _ in range(3):
        paragraphs = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 120))) for _ in range(3)]
        if rng.random() < 0.5:
            paragraphs[1] = paragraphs[1].replace(" code.", "\ncode.")  # soft line breaks
        text = "\n\n".join(paragraphs)
        cols = rng.choice([40, 80, 120])
        term = Term(rows=400, cols=cols)
        md = stream_into(term, text, [rng.randint(1, 12) for _ in range(5)], interval=1e9)
        assert term.text == reference(text, cols), text
        assert md._done_chars == 0  # reset once the paragraph was finished


def test_final_rows_of_a_plain_paragraph_reach_the_scrollback_at_once() -> None:
    term = Term(rows=60, cols=40)
    md = MarkdownStream(term.console, None, min_interval=0.0)
    md.live = LiveRegion(term.file, lambda: 60, lambda: [md.live_text()], console=term.console)
    words = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
    md.feed(words[:-3])
    printed = term.written.replace(md.live_text(), "")
    assert "one two" in printed and "fourt" not in printed  # the last row waits: its words may still move
    md.feed("een\n\n")
    md.finish()
    md.live.clear()
    assert term.text == reference(words, 40)


def test_code_lines_wait_for_the_redraw_clock_and_a_stalled_stream_still_shows_them() -> None:
    """Each code piece re-highlights its block from the fence, so complete lines are printed at most every
    `min_interval` (200 KB of code-heavy answer: 3.5 s -> 1.8 s of CPU); a tick prints what waits."""
    now = [0.0]
    term = Term(rows=60)
    md = MarkdownStream(term.console, None, min_interval=0.1, clock=lambda: now[0])
    md.live = LiveRegion(term.file, lambda: 60, lambda: [md.live_text()], console=term.console)

    def printed() -> str:
        return term.written.replace(md.live_text(), "")

    md.feed("```python\nfirst = 1\n")
    assert "first" in printed()  # a block's first lines are printed at once
    now[0] += 0.01
    md.feed("second = 2\n")
    now[0] += 0.01
    md.feed("third = 3\n")
    assert "second" not in printed() and "third" not in printed()  # held: within the interval
    now[0] += 0.2
    md.refresh(draw=False)  # the view's tick, with no new delta (the model stalled)
    assert "second" in printed() and "third" in printed()
    assert term.written.count("second") == 1
    now[0] += 0.01
    md.feed("fourth = 4\n```\n\nAfter.")
    md.finish()
    screen = term.text
    assert [screen.count(w) for w in ("first", "second", "third", "fourth", "After.")] == [1, 1, 1, 1, 1]
