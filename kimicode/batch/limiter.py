"""The batch's shared rate limiter: `kimicode.llm.ratelimit.SharedRateLimiter`, kept importable from here.

It moved next to the `RateGate` protocol it implements so that explorations (kimicode.branches, below the
batch layer) share it too.
"""

from __future__ import annotations

from kimicode.llm.ratelimit import SharedRateLimiter

__all__ = ["SharedRateLimiter"]
