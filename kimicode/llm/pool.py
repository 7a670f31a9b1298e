"""One HTTP connection pool per event loop, shared by the model clients that were given none.

A service running 200 agents on one loop used to hold 200 pools, each opening its own connections (and TLS
handshakes) to the same endpoint: memory, descriptors and a slow first turn. Clients borrow the loop's pool
at their first request and give it back at `aclose()`; the last one to give it back closes it, so a script's
`run_sync` (one agent, one `asyncio.run`) still leaves nothing open. The pool carries connections only:
each client sends its own key, URL and timeouts. A pool made with `share_connections` (batch, branches)
wins over this one.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any


class LoopPool:
    """The loop's pool (`http`, an httpx AsyncClient) and how many clients use it."""

    def __init__(self, http: Any) -> None:
        self.http = http
        self.users = 0


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopPool] = weakref.WeakKeyDictionary()


def borrow(make: Callable[[], Any]) -> LoopPool:
    """The running loop's pool (made with `make()` when it has none), counted as used once more."""
    loop = asyncio.get_running_loop()
    pool = _POOLS.get(loop)
    if pool is None or pool.http.is_closed:
        pool = _POOLS[loop] = LoopPool(make())
    pool.users += 1
    return pool


async def give_back(pool: LoopPool) -> None:
    """One user fewer; the last one closes the pool (a later borrower gets a new one)."""
    pool.users -= 1
    if pool.users > 0:
        return
    loop = asyncio.get_running_loop()
    if _POOLS.get(loop) is pool:
        del _POOLS[loop]  # before the await: a client borrowing meanwhile makes a new pool
    await pool.http.aclose()
