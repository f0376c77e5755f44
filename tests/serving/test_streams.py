"""inference.wire against the test run's real Redis."""

import asyncio
import uuid

from inference import wire


def test_publish_read_all_and_follow_end_after_done():
    gid = uuid.uuid4()
    wire.publish(gid, wire.tokens_event([1, 2], "ab", 2))
    first = wire.read_all(gid)
    wire.publish_many([(gid, wire.tokens_event([3], "c", 3))])
    wire.publish(gid, wire.done_event("length", 4, 3))
    events = wire.read_all(gid)
    assert [e["type"] for _, e in events] == ["tokens", "tokens", "done"]
    assert wire.collect_text(events) == "abc"
    assert [e for _, e in wire.read_all(gid, last_id=first[0][0])][0]["text"] == "c"

    async def run():
        return [e async for e in wire.follow(gid, block_ms=100, timeout_s=2)]

    followed = asyncio.run(run())
    assert [e["type"] for _, e in followed] == ["tokens", "tokens", "done"]
    import redis
    from django.conf import settings

    ttl = redis.Redis.from_url(settings.REDIS_URL).ttl(wire.stream_key(gid))
    assert 0 < ttl <= wire.TTL_S


def test_follow_gives_up_on_a_silent_stream():
    async def run():
        return [e async for e in wire.follow(uuid.uuid4(), block_ms=50, timeout_s=0.2)]

    assert asyncio.run(run()) == []
