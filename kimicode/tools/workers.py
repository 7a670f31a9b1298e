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

MAX_THREADS = 64
"""Threads of the caller's code alive at once in this process (running, or abandoned after a timeout)."""

_lock = threading.Lock()
_alive = 0


async def run_blocking(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` in a daemon thread of its own, awaited without blocking the event loop.

    Cancelling the awaiting task stops the waiting, not the thread. Raises ToolError when `MAX_THREADS`
    threads are already alive."""
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
    future: asyncio.Future[T] = loop.create_future()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)

    def deliver(ok: bool, value: Any) -> None:
        if future.done():
            return  # the caller stopped waiting (timeout, interrupt): the result is dropped
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

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
    return await future


def is_async_callable(fn: Any) -> bool:
    """True for an `async def` function, a partial of one, or an object whose `__call__` is one."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(type(fn), "__call__", None)  # noqa: B004 - the class's method, not callable()
    return call is not None and not inspect.isfunction(fn) and inspect.iscoroutinefunction(call)
