"""Fan-out of one session's events to its subscribers, in bounded memory.

Every event gets a sequence number (`seq`) and the time it was published (`ts`, Unix seconds), and is kept
in a ring of the last `keep` events, at most `keep_bytes` of them (so a client that reconnects with
`after=SEQ` misses nothing recent). Each subscriber has its own queue of at most `per_subscriber` events
and 8 MiB: publishing never waits for a subscriber, so a client that stops reading cannot slow the session,
and when its queue is full it is cut off (its stream ends with an `Overflow` event naming the last sequence
number it got) instead of growing without bound.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from kimicode.serve.wire import dumps

KEEP = 4096
"""Events kept for reconnecting subscribers..."""
KEEP_BYTES = 8 * 1024 * 1024
"""...and at most this many bytes of them."""
PER_SUBSCRIBER = 2048
"""Events queued for one subscriber before it is cut off..."""
PER_SUBSCRIBER_BYTES = 8 * 1024 * 1024
"""...or bytes of them."""


class Subscriber:
    """One reader of a session's events (an SSE response)."""

    def __init__(self, limit: int, limit_bytes: int = PER_SUBSCRIBER_BYTES) -> None:
        self.queue: asyncio.Queue[tuple[int, str] | None] = asyncio.Queue(maxsize=limit)
        self.limit_bytes = limit_bytes
        self.queued_bytes = 0
        self.overflowed = False
        self.last = 0

    def offer(self, item: tuple[int, str] | None) -> None:
        """Queue `item` unless the subscriber is full; then mark it cut off (and drop what it has queued)."""
        if self.overflowed:
            return
        size = len(item[1]) if item is not None else 0
        try:
            if self.queued_bytes + size > self.limit_bytes:
                raise asyncio.QueueFull
            self.queue.put_nowait(item)
            self.queued_bytes += size
        except asyncio.QueueFull:
            self.overflowed = True
            while not self.queue.empty():  # free its memory at once; the stream ends with Overflow
                self.queue.get_nowait()
            self.queued_bytes = 0
            self.queue.put_nowait(None)

    def taken(self, item: tuple[int, str] | None) -> tuple[int, str] | None:
        """`item` has left the queue (its bytes no longer count)."""
        if item is not None:
            self.queued_bytes -= len(item[1])
        return item


class Hub:
    """A session's event sequence and its subscribers."""

    def __init__(self, keep: int = KEEP, per_subscriber: int = PER_SUBSCRIBER, keep_bytes: int = KEEP_BYTES) -> None:
        self.seq = 0
        self.ring: deque[tuple[int, str]] = deque()
        self.keep, self.keep_bytes = keep, keep_bytes
        self.ring_bytes = 0
        self.subscribers: set[Subscriber] = set()
        self.per_subscriber = per_subscriber
        self.closed = False

    def publish(self, data: dict[str, Any]) -> int:
        """Number `data`, keep it and hand it to every subscriber; never waits."""
        self.seq += 1
        data = {**data, "seq": self.seq, "ts": round(time.time(), 6)}
        item = (self.seq, dumps(data))
        self.ring.append(item)
        self.ring_bytes += len(item[1])
        while len(self.ring) > self.keep or (self.ring_bytes > self.keep_bytes and len(self.ring) > 1):
            self.ring_bytes -= len(self.ring.popleft()[1])
        for sub in list(self.subscribers):
            sub.offer(item)
        return self.seq

    def close(self) -> None:
        """End every subscriber's stream (the session was closed)."""
        self.closed = True
        for sub in list(self.subscribers):
            sub.offer(None)

    async def follow(self, after: int | None, heartbeat: float = 15.0) -> AsyncIterator[tuple[int, str] | None]:
        """The events after `after` (None: only new ones), then each new one as it comes; yields None
        as a heartbeat when nothing happened for `heartbeat` seconds. Ends on close or overflow (the
        last item is then an Overflow event)."""
        sub = Subscriber(self.per_subscriber)
        backlog = [item for item in self.ring if after is not None and item[0] > after]
        self.subscribers.add(sub)
        try:
            for item in backlog:
                sub.last = item[0]
                yield item
            while not self.closed or not sub.queue.empty():
                got: tuple[int, str] | None
                try:
                    got = sub.taken(sub.queue.get_nowait())  # the common case, without a task per event
                except asyncio.QueueEmpty:
                    try:
                        got = sub.taken(await asyncio.wait_for(sub.queue.get(), heartbeat))
                    except TimeoutError:
                        yield None
                        continue
                if got is None:
                    if sub.overflowed:
                        yield (
                            sub.last,
                            dumps(
                                {
                                    "type": "Overflow",
                                    "after": sub.last,
                                    "text": f"this stream fell behind and was closed; reconnect with after={sub.last}",
                                }
                            ),
                        )
                    return
                if got[0] <= sub.last:  # already sent from the backlog
                    continue
                sub.last = got[0]
                yield got
        finally:
            self.subscribers.discard(sub)
