"""The input prompt of the interactive session: key bindings, history, completion and the toolbar's style.

Split from `app.py`; `build_prompt(session)` is called once, when the first message is read.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kimicode.safeio import private_dirs, private_open
from kimicode.ui import commands
from kimicode.ui.completion import PromptCompleter
from kimicode.ui.toolbar import toolbar_fragments

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.formatted_text import StyleAndTextTuples

    from kimicode.ui.app import Session


def build_prompt(session: Session) -> PromptSession[str]:
    """The prompt_toolkit session: Enter sends, Ctrl-J / Esc Enter add a line, Shift-Tab cycles the mode,
    Ctrl-O shows the last tool result in full, Ctrl-C clears the line (or exits when it is empty); a long
    paste shows as `[pasted N lines]`, Ctrl-V pastes the clipboard's image (ui/paste.py)."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.application.current import get_app
    from prompt_toolkit.completion import ThreadedCompleter
    from prompt_toolkit.filters import Condition
    from prompt_toolkit.history import FileHistory, History, InMemoryHistory
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
    from prompt_toolkit.keys import Keys
    from prompt_toolkit.styles import Style

    kb = KeyBindings()

    @kb.add("enter")
    def _send(event: KeyPressEvent) -> None:
        buf = event.current_buffer
        state = buf.complete_state
        if state is not None and state.current_completion is not None:
            buf.apply_completion(state.current_completion)
            return
        buf.validate_and_handle()

    @kb.add("c-j")
    @kb.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @kb.add("escape", "escape", filter=Condition(lambda: not get_app().current_buffer.text))
    def _rewind(event: KeyPressEvent) -> None:
        event.app.exit(result="/rewind")  # Esc Esc on an empty prompt opens the rewind list

    @kb.add("s-tab")
    def _mode(event: KeyPressEvent) -> None:
        session.cycle_mode()
        event.app.invalidate()

    @kb.add("c-o")
    def _expand(event: KeyPressEvent) -> None:
        from prompt_toolkit.application import run_in_terminal

        run_in_terminal(session.expand_last)

    @kb.add(Keys.BracketedPaste)
    def _paste(event: KeyPressEvent) -> None:  # long pastes collapse; an image path becomes @path
        event.current_buffer.insert_text(session.pastes.collapse(event.data, session.workspace))

    @kb.add("c-v")
    def _paste_image(event: KeyPressEvent) -> None:
        from kimicode.ui.paste import clipboard_image, mention

        image = clipboard_image(session.home)
        if image is None:
            session.announce("No image on the clipboard (text pastes with your terminal's paste key).", "dim")
        else:
            event.current_buffer.insert_text(mention(image, session.workspace) + " ")

    @kb.add("c-c")
    def _ctrl_c(event: KeyPressEvent) -> None:
        buf = event.current_buffer
        if buf.text:
            buf.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt)

    history: History
    try:
        private_dirs(session.home)
        path = session.home / "history"
        private_open(path, "a").close()  # typed prompts may hold secrets: 0600
        history = FileHistory(str(path))
    except OSError:
        history = InMemoryHistory()
    style = Style.from_dict(
        {
            "bottom-toolbar": "noreverse bg:#262626 fg:#bcbcbc",
            "toolbar.model": "bold fg:#5fafff",
            "toolbar.sep": "fg:#585858",
            "toolbar.dim": "fg:#808080",
            "toolbar.warn": "fg:#ffaf00 bold",
            "toolbar.yolo": "fg:#ff5f5f bold",
            "toolbar.edits": "fg:#ffaf00",
            "toolbar.plan": "fg:#5fd7d7 bold",
            "prompt": "bold fg:#5fafff",
        }
    )
    completer = PromptCompleter(lambda: commands.command_infos(session), session.index)
    return PromptSession(
        multiline=True,
        key_bindings=kb,
        history=history,
        completer=ThreadedCompleter(completer),
        complete_while_typing=True,
        bottom_toolbar=None if os.environ.get("TERM", "") == "dumb" else session.toolbar,
        style=style,
        prompt_continuation=lambda width, line, wrap: " " * width,
        enable_history_search=False,
        reserve_space_for_menu=6,
        include_default_pygments_style=False,
    )


def toolbar(session: Session) -> StyleAndTextTuples:
    """The bottom toolbar's content (never raises: a failing toolbar would take the prompt down)."""
    agent = session.agent
    fragments: StyleAndTextTuples = []
    try:
        fragments.extend(
            toolbar_fragments(
                model=agent.endpoint.model,
                effort=session.effort(),
                stats=session.stats,
                window=agent.effective_window,
                window_known=agent.window_source != "default",
                estimate=session.context_estimate(),
                mode=agent.permission_mode,
                workspace=session.workspace,
                branch=session.branch.get(),
                cost=session.cost(),
                mcp=session.mcp_status(),
            )
        )
    except Exception:
        fragments.append(("", f" {agent.endpoint.model} │ ⏵ {agent.permission_mode} "))
    line = getattr(session, "status_line", None)
    if line is not None and line.text:  # Claude Code's statusLine, under kimicode's own line
        fragments.append(("", f"\n {line.text} "))
    return fragments
