"""Threads for the caller's blocking code (sync `@tool` functions, a sync `approve` callback), kept apart from
the threads kimicode needs for itself.

asyncio's default executor is shared: kimicode's own file tools and its client setup run there, and
`asyncio.run` (so `run_sync`) and interpreter exit wait for every thread in it. A sync tool that times out
cannot be stopped (Python cannot kill a thread), so on that pool six stuck calls starved every agent in the
process and held exit until they returned.

Here each call gets its own daemon thread:
- the turn stops waiting at once on a timeout, an interrupt or a cancellation, and `run`, `run_sync`, program
  exit and Ctrl-C never wait for the thread (a daemon thread ends with the process);
- the thread is told through `ToolContext.cancelled`, and whatever it returns later is dropped; what it does
  meanwhile (a file it writes) still happens while the process lives, which docs/library.md says;
- at most `MAX_THREADS` such threads live at once in the process (running or abandoned): past that a call
  fails at once with a clear error instead of starting yet another thread that cannot be stopped.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kimicode.errors import ToolError

T = TypeVar("T")

MISREAD = (StopIteration, StopAsyncIteration, GeneratorExit, asyncio.CancelledError)
"""Exceptions asyncio and coroutines give a meaning of their own: raised as they are by the caller's code, a
future refuses them (StopIteration: the await never returns), a coroutine turns them into RuntimeError, or the
turn reads them as its own cancellation."""


class RaisedInThread(Exception):
    """The caller's sync function raised one of `MISREAD`: carried as a plain exception, named as it was."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        self.exception = exc
        self.name = type(exc).__name__


def described(exc: BaseException) -> str:
    """`Type: message` of what a caller's function raised (unwrapping RaisedInThread)."""
    if isinstance(exc, RaisedInThread):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


MAX_THREADS = 64
"""Threads of the caller's code alive at once in this process (running, or abandoned after a timeout)."""

_lock = threading.Lock()
_alive = 0


async def run_blocking(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` in a daemon thread of its own, awaited without blocking the event loop.

    Cancelling the awaiting task stops the waiting, not the thread. What `fn` raises is raised here, except
    the exceptions asyncio gives a meaning of its own (`MISREAD`), raised as RaisedInThread. Raises ToolError
    when `MAX_THREADS` threads are already alive."""
    global _alive
    with _lock:
        if _alive >= MAX_THREADS:
            raise ToolError(
                f"{MAX_THREADS} calls of synchronous functions are still running in this process (some "
                "abandoned after a timeout): a new one is not started. Make long tools check "
                "ctx.cancelled, or async."
            )
        _alive += 1
    loop = asyncio.get_running_loop()
    future: asyncio.Future[tuple[bool, Any]] = loop.create_future()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)

    def deliver(ok: bool, value: Any) -> None:
        if not future.done():  # else the caller stopped waiting (timeout, interrupt): the result is dropped
            future.set_result((ok, value))  # an exception as a value: a future refuses some (StopIteration)

    def work() -> None:
        global _alive
        try:
            try:
                value: Any = call()
                ok = True
            except BaseException as exc:  # SystemExit in a wrapped CLI: the awaiting side reports it
                value, ok = exc, False
            try:
                loop.call_soon_threadsafe(deliver, ok, value)
            except RuntimeError:
                pass  # the loop is closed: nobody waits any more
        finally:
            with _lock:
                _alive -= 1

    name = getattr(fn, "__name__", "call")
    threading.Thread(target=work, name=f"kimicode-user-{name}", daemon=True).start()
    ok, value = await future
    if ok:
        return value  # type: ignore[no-any-return]
    if isinstance(value, MISREAD):
        raise RaisedInThread(value) from value
    raise value


def is_async_callable(fn: Any) -> bool:
    """True for an `async def` function, a partial of one, or an object whose `__call__` is one."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(type(fn), "__call__", None)  # noqa: B004 - the class's method, not callable()
    return call is not None and not inspect.isfunction(fn) and inspect.iscoroutinefunction(call)
