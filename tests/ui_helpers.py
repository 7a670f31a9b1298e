"""Helpers for the terminal's tests without a terminal (importable as `ui_helpers` from every directory of
tests/): a real `Session` writing to a plain console, what it printed, and answers to its one-keystroke menus
(the menus themselves need a terminal)."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kimicode.testing import FakeServer


def plain_session(
    server: FakeServer, workspace: Path, monkeypatch: pytest.MonkeyPatch, *, width: int = 120, **options: Any
) -> Any:
    """A terminal `Session` on a plain console (no colours, no terminal) against the fake server, with fast
    retries; `options` are more `SessionOptions` (e.g. `permission_mode="yolo"`). The key and endpoint come from
    the environment, as a user's terminal session gets them."""
    from kimicode.ui.app import Session, SessionOptions

    monkeypatch.setenv("KIMI_API_KEY", "sk-test")
    monkeypatch.setenv("KIMI_BASE_URL", server.base_url)
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    return Session(SessionOptions(workspace=workspace, retry_base_delay=0.01, **options), console, plain=True)


def output(session: Any) -> str:
    """What `session` printed since the last call (the console's buffer is emptied)."""
    value: str = session.console.file.getvalue()
    session.console.file.seek(0)
    session.console.file.truncate()
    return value


PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63fccfc0500f000485"
    "018084a98c210000000049454e44ae426082"
)
"""A 1x1 PNG (image attachments and pastes)."""

Answer = str | None | Callable[[list[Any]], str | None]


def answers(monkeypatch: pytest.MonkeyPatch, *values: Answer) -> list[str]:
    """Answer the one-keystroke menus in order with `values` (a value, None for Esc, or a function of the
    options); returns the questions asked, each with its options' labels."""
    from kimicode.ui import approvals

    queue = list(values)
    asked: list[str] = []

    async def choose(question: str, options: list[Any]) -> str | None:
        asked.append(question + " | " + " | ".join(o.label for o in options))
        answer = queue.pop(0)
        return answer(options) if callable(answer) else answer

    monkeypatch.setattr(approvals, "choose", choose)
    return asked
