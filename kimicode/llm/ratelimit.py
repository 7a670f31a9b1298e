"""A rate limiter shared by every task of a batch (and every branch of an exploration): one 429 slows them
all, honouring Retry-After.

Without it, 32 concurrent tasks that hit a rate limit each back off on their own and then retry
together, hitting the limit again. With it, a 429 closes the gate for the delay the server asked for
(or the client's backoff) and every task waits at the gate before its next request.
"""

from __future__ import annotations

import asyncio
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
