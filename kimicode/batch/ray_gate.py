"""The shared 429 gate across Ray workers: one named actor holds the closure, each worker a cached view of it.

A 429 seen by any task closes the gate for every task on every worker, as the local engine's
`SharedRateLimiter` does inside one process. Asking the actor before every request would add a round trip
to each model step, so a worker asks at most every `refresh` seconds (0.25 s) and closes its own view at
once when one of its own tasks is throttled: other workers learn of a 429 within `refresh` seconds.
The actor deals in seconds remaining, never in clock readings, so workers' clocks need not agree.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any


class GateState:
    """The actor's state (made a Ray actor by `gate_actor`); kept plain so it is tested without Ray."""

    def __init__(self, max_delay: float = 600.0) -> None:
        self.max_delay = max_delay
        self._until = 0.0
        self.throttles = 0

    def throttled(self, delay: float) -> float:
        """Close the gate for `delay` seconds from now (never shortening a closure); seconds it stays closed."""
        self.throttles += 1
        delay = min(max(delay, 0.0), self.max_delay)
        self._until = max(self._until, time.monotonic() + delay)
        return self.closed_for()

    def closed_for(self) -> float:
        """Seconds until the gate opens (0 when open)."""
        return max(0.0, self._until - time.monotonic())

    def stats(self) -> dict[str, float]:
        return {"throttles": self.throttles, "closed_for": self.closed_for()}


def gate_actor(ray: Any, name: str) -> Any:
    """Start the batch's gate actor under `name` (workers find it with `ray.get_actor(name)`)."""
    return ray.remote(num_cpus=0, max_restarts=-1)(GateState).options(name=name).remote()


class RayGate:
    """Implements `kimicode.llm.client.RateGate` in a worker, backed by the named gate actor."""

    def __init__(self, handle: Any, refresh: float = 0.25) -> None:
        self._handle = handle
        self.refresh = refresh
        self._until = 0.0
        self._checked = float("-inf")

    async def wait(self) -> None:
        """Return when the gate is open, as far as this worker knows (asking the actor every `refresh` s)."""
        while True:
            now = time.monotonic()
            if now - self._checked >= self.refresh:
                self._checked = now
                try:
                    remaining = float(await self._handle.closed_for.remote())
                except Exception:  # the gate actor is gone (the batch is ending): go on without it
                    remaining = 0.0
                self._until = max(self._until, time.monotonic() + remaining)
            delay = self._until - time.monotonic()
            if delay <= 0:
                return
            await asyncio.sleep(min(delay, self.refresh))

    def throttled(self, delay: float) -> None:
        """This worker saw a 429: close its own view now and tell the actor (without waiting for it)."""
        self._until = max(self._until, time.monotonic() + max(delay, 0.0))
        self._handle.throttled.remote(delay)
