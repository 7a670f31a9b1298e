"""The event hub in bounded memory: numbering, replay after a sequence number, a reader cut off when it falls
behind (the others unaffected), the ring bounded in events and in bytes."""

from __future__ import annotations

import asyncio
import json

from kimicode.serve.hub import Hub


async def take(hub: Hub, after: int | None, n: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    async for item in hub.follow(after, heartbeat=0.05):
        if item is None:
            break
        out.append(json.loads(item[1]))
        if len(out) == n:
            break
    return out


def test_events_are_numbered_and_replayed_after_a_number() -> None:
    async def main() -> None:
        hub = Hub()
        for n in range(5):
            hub.publish({"type": "Notice", "text": str(n)})
        got = await take(hub, 2, 3)
        assert [e["seq"] for e in got] == [3, 4, 5] and [e["text"] for e in got] == ["2", "3", "4"]
        assert all(isinstance(e["ts"], float) for e in got)
        assert await take(hub, None, 1) == []  # a new reader without `after` gets only what comes next

    asyncio.run(main())


def test_a_reader_that_falls_behind_is_cut_off_and_the_others_are_not() -> None:
    async def main() -> None:
        hub = Hub(per_subscriber=8)
        hub.publish({"type": "Notice", "text": "start"})
        slow = hub.follow(0)
        fast_seen: list[int] = []

        async def fast() -> None:
            async for item in hub.follow(0, heartbeat=0.05):
                if item is None:
                    return
                fast_seen.append(item[0])
                if item[0] == 50:
                    return

        reader = asyncio.ensure_future(fast())
        await asyncio.sleep(0)
        first = await slow.__anext__()  # subscribed (the first event), then never reads while 49 more come
        assert first is not None
        for n in range(49):
            hub.publish({"type": "Notice", "text": str(n)})
            await asyncio.sleep(0.001)
        await reader
        assert fast_seen == list(range(1, 51))
        (queued,) = [s for s in hub.subscribers if s.overflowed]
        assert queued.queue.qsize() == 1  # what it had queued is freed; only the end marker is left
        rest = [item async for item in slow]
        assert rest and json.loads(rest[-1][1])["type"] == "Overflow"  # type: ignore[index]
        assert not hub.subscribers

    asyncio.run(main())


def test_the_ring_is_bounded_in_events_and_bytes() -> None:
    hub = Hub(keep=100, keep_bytes=50_000)
    for n in range(500):
        hub.publish({"type": "ContentDelta", "text": "x" * (10 if n < 300 else 1000)})
    assert len(hub.ring) <= 100 and hub.ring_bytes <= 50_000 + 1100
    assert hub.ring[-1][0] == 500 and hub.ring_bytes == sum(len(t) for _, t in hub.ring)


def test_a_reader_is_also_cut_off_by_the_bytes_it_has_waiting() -> None:
    async def main() -> None:
        hub = Hub(per_subscriber=1000)
        hub.publish({"type": "Notice", "text": "start"})
        slow = hub.follow(0)
        assert await slow.__anext__() is not None
        (reader,) = hub.subscribers
        reader.limit_bytes = 100_000
        for _ in range(30):
            hub.publish({"type": "ToolCallFinished", "content": "y" * 10_000})
        assert reader.overflowed and reader.queued_bytes == 0 and reader.queue.qsize() == 1
        rest = [item async for item in slow]
        assert json.loads(rest[-1][1])["type"] == "Overflow"  # type: ignore[index]

    asyncio.run(main())
