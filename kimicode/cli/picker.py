"""The `kimicode -r` picker: a list moved through with the arrow keys and narrowed by typing.

Typing filters the rows (every word must appear, case-insensitive: a date, `interactive`, words of the
first prompt); ↑/↓ move, Enter resumes the highlighted session, Esc or Ctrl-C cancels. A number typed
alone and confirmed with Enter picks that row of the full list, as the numbered prompt used to.
"""

from __future__ import annotations

from collections.abc import Sequence

HELP = " ↑↓ move · type to filter · Enter resumes · Esc cancels"

VISIBLE = 12
"""Rows shown at once (the list scrolls with the selection)."""


def matches(row: str, query: str) -> bool:
    """True when every word of `query` occurs in `row` (case-insensitive)."""
    low = row.lower()
    return all(word in low for word in query.lower().split())


def pick(title: str, header: str, rows: Sequence[str]) -> int | None:
    """Ask which row to take; its index in `rows`, or None when cancelled."""
    from prompt_toolkit.application import Application
    from prompt_toolkit.buffer import Buffer
    from prompt_toolkit.formatted_text import StyleAndTextTuples
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
    from prompt_toolkit.layout import BufferControl, FormattedTextControl, HSplit, Layout, Window
    from prompt_toolkit.layout.dimension import Dimension

    query = Buffer(multiline=False)
    selected = [0]

    def shown() -> list[int]:
        return [i for i, row in enumerate(rows) if matches(row, query.text)]

    def listing() -> StyleAndTextTuples:
        found = shown()
        selected[0] = min(selected[0], max(0, len(found) - 1))
        out: StyleAndTextTuples = [("bold", f"{title}\n"), ("fg:ansibrightblack", f"   {header}\n")]
        if not found:
            return [*out, ("fg:ansiyellow", "   (no session matches; Backspace to widen)\n")]
        first = max(0, min(selected[0] - VISIBLE // 2, len(found) - VISIBLE))
        for pos in range(first, min(len(found), first + VISIBLE)):
            mine = pos == selected[0]
            out.append(("", " ❯ " if mine else "   "))
            out.append(("reverse" if mine else "", rows[found[pos]]))
            out.append(("", "\n"))
        more = len(found) - VISIBLE
        if more > 0:
            out.append(("fg:ansibrightblack", f"   … {more} more (type to filter)\n"))
        return out

    kb = KeyBindings()

    @kb.add("up")
    @kb.add("c-p")
    def _up(event: KeyPressEvent) -> None:
        selected[0] = max(0, selected[0] - 1)

    @kb.add("down")
    @kb.add("c-n")
    def _down(event: KeyPressEvent) -> None:
        selected[0] = min(max(0, len(shown()) - 1), selected[0] + 1)

    @kb.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        text = query.text.strip()
        if text.isdigit() and 1 <= int(text) <= len(rows):
            event.app.exit(result=int(text) - 1)
            return
        found = shown()
        if found:
            event.app.exit(result=found[selected[0]])

    @kb.add("escape", eager=True)
    @kb.add("c-c")
    @kb.add("c-d")
    def _cancel(event: KeyPressEvent) -> None:
        event.app.exit(result=None)

    query.on_text_changed += lambda _buf: selected.__setitem__(0, 0)
    filter_line = HSplit(
        [
            Window(
                FormattedTextControl(listing),
                height=Dimension(max=2 * VISIBLE + 4),
                dont_extend_height=True,
                wrap_lines=True,  # a narrow terminal wraps a row rather than hiding its first prompt
            ),
            Window(BufferControl(buffer=query), height=1, get_line_prefix=lambda _n, _w: [("bold", " filter › ")]),
            Window(
                FormattedTextControl([("fg:ansibrightblack", HELP)]),
                height=1,
            ),
        ]
    )
    layout = Layout(filter_line, focused_element=query)
    app: Application[int | None] = Application(layout=layout, key_bindings=kb, erase_when_done=True)
    try:
        return app.run()
    except (EOFError, KeyboardInterrupt):
        return None
