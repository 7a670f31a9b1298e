"""A caller's session store is called from one thread: the thread of the event loop that uses it.

A store need not be thread-safe, and a `sqlite3` connection refuses any thread but its own. Agents call
their store on the event loop; work that runs in a worker thread (an exploration opening its branches, a
checkpoint, a rewind) hands its calls to that loop: `append` without waiting (ahead of the work waiting for the
thread), `load` waiting for the answer. Outside any running loop (sync code between runs) the store is called
where it is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any, TypeVar

from kimicode.errors import SessionError

T = TypeVar("T")

WAIT = 60.0
"""Seconds a worker thread waits for the loop to call the store for it (a blocked loop is a caller's bug)."""

_LOOPS: dict[int, asyncio.AbstractEventLoop] = {}
"""The loop each store (by id) was last called on."""


def home_loop(store: Any, known: asyncio.AbstractEventLoop | None = None) -> asyncio.AbstractEventLoop | None:
    """The running loop to hand a call of `store` to (the one it was last called on, else `known`), or None
    when it is to be called here (on its loop now: remembered; or no loop of it running)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        for key in [k for k, v in _LOOPS.items() if v.is_closed()]:
            del _LOOPS[key]  # loops of finished `asyncio.run`s
        _LOOPS[id(store)] = loop
        return None
    home = _LOOPS.get(id(store), known)
    return home if home is not None and home.is_running() else None


def call(store: Any, fn: Callable[[], T]) -> T:
    """`fn()` (a call of `store`) on the store's loop thread, waiting for it when called from another thread."""
    loop = home_loop(store)
    if loop is None:
        return fn()
    done: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if done.set_running_or_notify_cancel():
            try:
                done.set_result(fn())
            except BaseException as exc:  # raised in the caller's thread below
                done.set_exception(exc)

    loop.call_soon_threadsafe(run)
    try:
        return done.result(timeout=WAIT)
    except concurrent.futures.TimeoutError:
        done.cancel()
        raise SessionError(
            f"the session store {type(store).__name__} is called on its event loop's thread, "
            f"which did not run the call within {WAIT:g} s (is the loop blocked?)"
        ) from None
