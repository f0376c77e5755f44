"""inference.serving.sse.follow: events, keep-alive ticks while silent, a timeout at the end."""

import asyncio
import functools
import threading
import time
import uuid

from inference import wire
from inference.serving import sse


def collect(gid, **kwargs):
    async def run():
        return [event["type"] async for _id, event in sse.follow(gid, owner=3, **kwargs)]

    return asyncio.run(run())


def test_ticks_while_silent_then_the_events():
    gid = uuid.uuid4()

    def later():
        time.sleep(0.35)
        wire.publish(gid, wire.tokens_event([97], "a", 1), node=3)
        wire.publish(gid, wire.done_event("stop", 1, 1), node=3)

    threading.Thread(target=later).start()
    kinds = collect(gid, keepalive_s=0.1, block_ms=50)
    assert kinds[-2:] == ["tokens", "done"]
    assert set(kinds[:-2]) == {sse.KEEPALIVE} and len(kinds) >= 4


def test_a_stream_that_stays_silent_ends_with_a_timeout():
    kinds = collect(uuid.uuid4(), keepalive_s=None, idle_timeout_s=0.2, block_ms=50)
    assert kinds == [sse.TIMEOUT]


def test_followers_share_one_read_per_round_and_a_newcomer_is_not_kept_waiting():
    """The loop's stream hub: 16 followed streams, 4 rounds of one event each published
    together, cost about one XREAD a round, not one per stream; a follower that joins while
    the hub is blocked in a long read (block_ms 5000) gets its events at once (the wake)."""
    from inference.serving import stream_hub

    gids = [uuid.uuid4() for _ in range(16)]
    blocker_gid, newcomer = uuid.uuid4(), uuid.uuid4()

    async def one(gid):
        return [e["type"] async for batch in sse.follow_batches(gid, owner=3) for _, e in batch]

    async def run():
        hub = stream_hub.hub()
        tasks = [asyncio.create_task(one(g)) for g in gids]
        await asyncio.sleep(0.2)  # all of them are followed
        reads0 = hub.reads
        for r in range(4):
            items: list = [(g, wire.tokens_event([97], "a", r + 1)) for g in gids]
            if r == 3:
                items += [(g, wire.done_event("stop", 1, 4)) for g in gids]
            await asyncio.to_thread(functools.partial(wire.publish_many, items, node=3))
            await asyncio.sleep(0.05)
        results = await asyncio.gather(*tasks)
        reads = hub.reads - reads0

        hub.block_ms = 5000
        blocker = asyncio.create_task(one(blocker_gid))  # keeps the hub in a long read
        await asyncio.sleep(0.2)
        await asyncio.to_thread(wire.publish, newcomer, wire.done_event("stop", 1, 0), node=3)
        t0 = time.monotonic()
        late = await one(newcomer)
        waited = time.monotonic() - t0
        await asyncio.to_thread(wire.publish, blocker_gid, wire.done_event("stop", 1, 0), node=3)
        await blocker
        return results, reads, late, waited

    results, reads, late, waited = asyncio.run(run())
    assert all(r == ["tokens"] * 4 + ["done"] for r in results)
    assert reads <= 12, reads  # 4 rounds (a publish may split a read), not 4 x 16
    assert late == ["done"] and waited < 1.0, waited


def test_followers_that_join_together_share_one_wake():
    """16 followers joining while the hub is blocked in a long read: one wake ends that read
    (not 16 Redis round trips), and every one of them gets its events at once."""
    from inference.serving import stream_hub

    blocker_gid, gids = uuid.uuid4(), [uuid.uuid4() for _ in range(16)]

    async def one(gid):
        return [e["type"] async for batch in sse.follow_batches(gid, owner=3) for _, e in batch]

    async def run():
        hub = stream_hub.hub()
        hub.block_ms = 5000
        blocker = asyncio.create_task(one(blocker_gid))  # the hub is in a long read
        await asyncio.sleep(0.2)
        done = [(g, wire.done_event("stop", 1, 0)) for g in gids]
        await asyncio.to_thread(functools.partial(wire.publish_many, done, node=3))
        wakes0, t0 = hub.wakes, time.monotonic()
        results = await asyncio.gather(*(one(g) for g in gids))  # they join together
        waited, wakes = time.monotonic() - t0, hub.wakes - wakes0
        await asyncio.to_thread(wire.publish, blocker_gid, wire.done_event("stop", 1, 0), node=3)
        await blocker
        return results, waited, wakes

    results, waited, wakes = asyncio.run(run())
    assert all(r == ["done"] for r in results)
    assert waited < 1.0, waited
    assert wakes == 1, wakes
