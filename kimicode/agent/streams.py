"""Event streams that cannot hang: one unit of agent work (a turn or a compaction) run as a task whose
events are queued for the consumer before any `on_event` hook sees them.

- A hook that raises is reported (once per stream, as a warning `Notice`, and in `hook_errors`) and
  never stops, hangs or changes the outcome of the work.
- The stream is an async iterator and an async context manager. Leaving it early (`break`,
  an exception, the consumer being cancelled, `aclose()`, or dropping the last reference) cancels the
  work; the agent waits for the cancelled work to finish cleaning up before it starts the next one.
- Awaiting the stream (`await agent.compact()`) consumes every event and returns the work's result.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Generator
from types import TracebackType
from typing import Any, TypeVar

from kimicode import errors
from kimicode.events import Event, Notice, TurnFinished

T = TypeVar("T")
Emit = Callable[[Event], None]
Hook = Callable[[Event], None]

_END: Any = object()


class Sink:
    """Where the work emits: the queue first, then the hook (whose failures are recorded, not raised).

    Deliberately holds no reference to its EventStream, so a consumer that drops the stream lets it be
    collected (which cancels the work) even while the work still runs.
    """

    def __init__(self, hook: Callable[[], Hook | None], outgoing: Callable[[Event], Event] | None = None) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self._hook = hook
        self._outgoing = outgoing
        self.hook_errors: list[str] = []

    def __call__(self, event: Event) -> None:
        if self._outgoing is not None:
            event = self._outgoing(event)
        self.queue.put_nowait(event)
        hook = self._hook()
        if hook is None:
            return
        try:
            returned: Any = hook(event)
            if inspect.isawaitable(returned):  # an `async def` hook: its coroutine would never run
                if inspect.iscoroutine(returned):
                    returned.close()
                raise TypeError(
                    "on_event must be a plain function; an async hook is never awaited "
                    "(use `async for event in agent.stream(...)` instead)"
                )
        except BaseException as exc:  # a broken hook is the caller's bug, whatever it raises (pytest.fail
            # raises a BaseException): report it, never let it end the work or the batch around it
            text = f"on_event hook raised {type(exc).__name__}: {exc} (on {type(event).__name__})"
            self.hook_errors.append(text)
            if len(self.hook_errors) == 1 and not isinstance(event, TurnFinished):  # one notice; none after the end
                self.queue.put_nowait(Notice(text + "; later hook errors are in RunResult.hook_errors", "warning"))


class EventStream(Coroutine[Any, Any, T]):
    """The events of one unit of work; see the module docstring for the guarantees.

    It is also a coroutine (consuming the events and returning the result), so `asyncio.run(...)`,
    `asyncio.create_task(...)` and `await` all accept it as they accepted the old coroutine methods.
    """

    def __init__(
        self,
        work: Callable[[Emit], Coroutine[Any, Any, T]],
        hook: Callable[[], Hook | None],
        claim: Callable[[EventStream[Any]], Awaitable[None]],
        release: Callable[[asyncio.Task[Any]], None],
        outgoing: Callable[[Event], Event] | None = None,
    ) -> None:
        self._work = work
        self._claim = claim
        self._release = release
        self._sink = Sink(hook, outgoing)
        self._task: asyncio.Task[T] | None = None
        self._started = False
        self._finished = False
        self._awaiting: Coroutine[Any, Any, T] | None = None
        self.closed = False
        """True once the consumer is done with the stream (finished, closed or left)."""
        self.consumer: asyncio.Task[Any] | None = None
        """The task that iterates the stream (set at the first event): when that same task starts other
        work on the agent outside an `async with` block of this stream, it has left the stream (a `break`
        without `aclose()`)."""
        self.entered = False
        """Inside `async with stream:` (the consumer may come back to it)."""

    @property
    def hook_errors(self) -> list[str]:
        """What the `on_event` hook raised during this stream (empty when it never failed)."""
        return self._sink.hook_errors

    @property
    def task(self) -> asyncio.Task[T] | None:
        return self._task

    async def _start(self) -> None:
        if self._started:
            return
        self._started = True
        self.consumer = asyncio.current_task()
        await self._claim(self)
        sink = self._sink
        work = self._work

        async def run() -> T:
            try:
                return await work(sink)
            finally:
                sink.queue.put_nowait(_END)

        self._task = asyncio.create_task(run())
        self._release(self._task)

    def __aiter__(self) -> EventStream[T]:
        return self

    async def __anext__(self) -> Event:
        if self._finished or self.closed:
            raise StopAsyncIteration
        await self._start()
        assert self._task is not None
        try:
            event = await self._sink.queue.get()
        except asyncio.CancelledError:  # the consumer was cancelled: so is the work
            await self.aclose()
            raise
        if event is _END:
            self._finished = True
            self.closed = True
            await self._task  # the work's own exception (or cancellation) surfaces here
            raise StopAsyncIteration
        return event  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """Stop consuming: cancel the work if it still runs and wait until it has cleaned up."""
        self.closed = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    async def __aenter__(self) -> EventStream[T]:
        await self._start()
        self.entered = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.entered = False
        await self.aclose()

    async def result(self) -> T:
        """Consume the remaining events and return what the work returned."""
        async with self:
            async for _ in self:
                pass
            assert self._task is not None
            return self._task.result()

    def _coroutine(self) -> Coroutine[Any, Any, T]:
        if self._awaiting is None:
            self._awaiting = self.result()
        return self._awaiting

    def __await__(self) -> Generator[Any, None, T]:
        return self._coroutine().__await__()

    def send(self, value: Any) -> Any:
        return self._coroutine().send(value)

    def throw(self, typ: Any, val: BaseException | object = None, tb: TracebackType | None = None) -> Any:
        if isinstance(typ, BaseException):
            return self._coroutine().throw(typ)
        exc = typ() if val is None else (val if isinstance(val, BaseException) else typ(val))
        return self._coroutine().throw(exc)

    def close(self) -> None:
        if self._awaiting is not None:
            self._awaiting.close()

    def __del__(self) -> None:
        task = self._task
        if task is not None and not task.done():
            self.closed = True
            try:
                task.cancel()  # dropped without being closed: stop the work (the agent waits for it)
            except RuntimeError:  # the loop is already closed
                pass


def same_loop(worker: asyncio.Task[Any]) -> None:
    """Refuse to touch a turn that runs on another thread's event loop (its task cannot be awaited or
    safely cancelled from here)."""
    if worker.get_loop() is not asyncio.get_running_loop():
        raise errors.UsageError(
            "a turn is already running on this agent on another event loop (thread); "
            "an agent is used from one event loop at a time"
        )
