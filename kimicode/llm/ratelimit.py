"""A rate limiter shared by every task of a batch (and every branch of an exploration): one 429 slows them
all, honouring Retry-After; and a bound on the requests in flight to one server (`SlotLimiter`): its slots.

Without it, 32 concurrent tasks that hit a rate limit each back off on their own and then retry
together, hitting the limit again. With it, a 429 closes the gate for the delay the server asked for
(or the client's backoff) and every task waits at the gate before its next request.
"""

from __future__ import annotations

import asyncio
import contextvars
import time


class SharedRateLimiter:
    """Implements `kimicode.llm.client.RateGate`; one per batch or exploration, used by every client in it."""

    def __init__(self, *, max_delay: float = 600.0) -> None:
        self.max_delay = max_delay
        self._until = 0.0
        self.throttles = 0
        """How many 429s were reported (shown in the batch summary)."""
        self.waited = 0.0
        """Seconds tasks spent waiting at the gate, summed over tasks."""

    async def wait(self) -> None:
        """Sleep until the gate is open (it may be closed again by a 429 while sleeping)."""
        while True:
            delay = self._until - time.monotonic()
            if delay <= 0:
                return
            self.waited += delay
            await asyncio.sleep(delay)

    def throttled(self, delay: float) -> None:
        """Close the gate for `delay` seconds from now (never shortening an existing closure)."""
        self.throttles += 1
        delay = min(max(delay, 0.0), self.max_delay)
        self._until = max(self._until, time.monotonic() + delay)

    @property
    def closed_for(self) -> float:
        """Seconds until the gate opens (0 when open)."""
        return max(0.0, self._until - time.monotonic())


class SlotLimiter:
    """At most `limit` requests in flight to one endpoint from the tasks of a batch or the branches of an
    exploration: the server's slots (llama.cpp's `total_slots` in `/props`), lowered when the server pushes
    back (its shared context is full: `pushed_back`) and raised again one at a time after answers come back
    (`answered`). Unbounded until discovery reports slots or the server first pushes back."""

    def __init__(self) -> None:
        self.slots: int | None = None
        """What the server reported."""
        self.limit: int | None = None
        self.in_flight = 0
        self.pushbacks = 0
        self._answered = 0
        self._waiters: list[asyncio.Future[None]] = []

    def bound(self, slots: int) -> None:
        """The server serves `slots` requests at once (the first report wins; later agents ask the same server)."""
        if self.slots is None and slots > 0:
            self.slots = slots
            self.limit = slots if self.limit is None else min(self.limit, slots)

    def pushed_back(self) -> None:
        """The server refused a request for lack of room shared with the others in flight: one fewer at once."""
        self.pushbacks += 1
        self._answered = 0
        current = self.limit if self.limit is not None else self.in_flight + 1  # the refused one is done already
        self.limit = max(1, current - 1)

    def answered(self) -> None:
        """A request was answered: after as many answers as the limit in a row, allow one more (up to the slots)."""
        self._answered += 1
        if self.limit is not None and self._answered >= self.limit and self.limit < (self.slots or self.limit + 1):
            self.limit += 1
            self._answered = 0
            self._wake()

    async def acquire(self) -> None:
        while self.limit is not None and self.in_flight >= self.limit:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self.in_flight += 1

    def release(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self._wake()

    def _wake(self) -> None:
        for waiter in self._waiters:  # each re-checks the limit when it runs
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()


_SHARED_SLOTS: contextvars.ContextVar[dict[str, SlotLimiter] | None] = contextvars.ContextVar(
    "kimicode_shared_slots", default=None
)


def share_slots() -> None:
    """From here on in the current context, requests to each endpoint share one `SlotLimiter` (kimicode batch and
    explorations call it, through `kimicode.llm.discovery.share_windows`). Use on one event loop only."""
    _SHARED_SLOTS.set({})


def slots_for(base_url: str) -> SlotLimiter | None:
    """The limiter of `base_url` in the current context (made on first use), or None outside a shared context."""
    shared = _SHARED_SLOTS.get()
    if shared is None:
        return None
    key = base_url.rstrip("/")
    if key not in shared:
        shared[key] = SlotLimiter()
    return shared[key]
