"""The context window the toolbar shows, learnt when the session opens: the server is asked (or its last
answer read from KIMICODE_HOME) in the background while the user types, instead of at the first request,
so a resumed session (`-c`) shows the window the server reported rather than the model's default."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kimicode.ui.host import SessionHost

__all__ = ["learn_window"]

_RUNNING: set[asyncio.Task[None]] = set()
"""The tasks under way (a task nobody references may be collected before it finishes)."""


def learn_window(session: SessionHost) -> asyncio.Task[None] | None:
    """Start asking about the window (once per agent); the prompt is redrawn when the answer is in."""
    parts = session.agent.parts
    if parts.window_discovered:
        return None
    task = asyncio.create_task(parts.discover_window(session.on_side_event))

    def done(finished: asyncio.Future[Any]) -> None:
        from prompt_toolkit.application import get_app_or_none

        _RUNNING.discard(task)
        if finished.cancelled():
            return
        exc = finished.exception()
        if exc is not None:  # the first request reports it again, with what to do
            session.announce(f"! context window: {exc}", "yellow")
            return
        app = get_app_or_none()
        if app is not None and app.is_running:
            app.invalidate()  # the toolbar shows the window now

    _RUNNING.add(task)
    task.add_done_callback(done)
    return task
