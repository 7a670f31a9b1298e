"""Keys pressed while a turn runs: Esc and Ctrl-C interrupt, Shift-Tab cycles the permission mode.

No prompt is on screen while the agent works, so the terminal is put in raw mode (no echo, no line
buffering, and Ctrl-C arrives as a key rather than SIGINT) and stdin is read through prompt_toolkit's
input object, attached to the running asyncio loop. Its escape-sequence parser tells a lone Esc from
the start of an arrow key: a pending Esc is flushed after a short pause, as terminal editors do.
Anything else typed is echoed under the status line (the app draws it): Enter queues it to be sent
when the turn ends; after an interrupt it is offered as the start of the next prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

ESC_TIMEOUT = 0.05
"""Seconds to wait after an Esc byte for the rest of an escape sequence."""


class KeyListener:
    """Listen for keys on the terminal while no prompt is active.

    `on_key` receives `"escape"`, `"c-c"`, `"s-tab"`, `"c-o"`, `"c-s"` (prompt_toolkit key names), `"enter"`, and
    `"typed"` after `typed` changed: printable characters and pastes accumulate there (Backspace and
    Ctrl-U edit it).
    """

    def __init__(self, on_key: Callable[[str], None]) -> None:
        self.on_key = on_key
        self.typed = ""
        self._input: Any = None
        self._raw: AbstractContextManager[None] | None = None
        self._attached: AbstractContextManager[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        try:
            if sys.stdin.isatty():
                from prompt_toolkit.input import create_input

                self._input = create_input()
        except (OSError, ValueError):  # no usable terminal: Ctrl-C still arrives as SIGINT
            self._input = None

    @property
    def active(self) -> bool:
        return self._attached is not None

    def start(self) -> None:
        """Enter raw mode and start reading keys (no-op without a terminal or when already started)."""
        if self._input is None or self._attached is not None:
            return
        try:
            raw = self._input.raw_mode()
            raw.__enter__()
            self._raw = raw
            attached = self._input.attach(self._ready)
            attached.__enter__()
        except Exception:  # termios refused, or stdin can't be watched: Ctrl-C still arrives as SIGINT
            self._restore()
            return
        self._attached = attached

    def stop(self) -> None:
        """Stop reading and restore the terminal mode."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._attached is not None:
            attached, self._attached = self._attached, None
            attached.__exit__(None, None, None)
        self._restore()

    def _restore(self) -> None:
        if self._raw is not None:
            raw, self._raw = self._raw, None
            with contextlib.suppress(Exception):
                raw.__exit__(None, None, None)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stop listening for the duration (a prompt needs the terminal), then listen again."""
        was_active = self.active
        self.stop()
        try:
            yield
        finally:
            if was_active:
                self.start()

    def _ready(self) -> None:
        if self._input is None:
            return
        try:
            keys = self._input.read_keys()
        except OSError:
            return
        self._dispatch(keys)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(ESC_TIMEOUT, self._flush)

    def _flush(self) -> None:
        self._timer = None
        if self._input is not None and self._attached is not None:
            self._dispatch(self._input.flush_keys())

    def _dispatch(self, keys: list[Any]) -> None:
        for press in keys:
            key = str(getattr(press.key, "value", press.key))
            if key in ("escape", "c-c", "s-tab", "c-o", "c-s"):
                self.on_key(key)
            elif key in ("c-m", "enter"):
                self.on_key("enter")
            elif key == "<bracketed-paste>":
                self.typed += press.data.replace("\r\n", "\n").replace("\r", "\n")
                self.on_key("typed")
            elif len(key) == 1 and key.isprintable():
                self.typed += key
                self.on_key("typed")
            elif key in ("c-h", "backspace") and self.typed:
                self.typed = self.typed[:-1]
                self.on_key("typed")
            elif key == "c-u" and self.typed:
                self.typed = ""
                self.on_key("typed")
