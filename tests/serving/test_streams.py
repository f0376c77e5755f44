"""inference.streams against the test run's real Redis."""

import asyncio
import uuid

from inference import streams


def test_publish_read_all_and_follow_end_after_done():
    gid = uuid.uuid4()
    streams.publish(gid, streams.tokens_event([1, 2], "ab", 2))
    first = streams.read_all(gid)
    streams.publish_many([(gid, streams.tokens_event([3], "c", 3))])
    streams.publish(gid, streams.done_event("length", 4, 3))
    events = streams.read_all(gid)
    assert [e["type"] for _, e in events] == ["tokens", "tokens", "done"]
    assert streams.collect_text(events) == "abc"
    assert [e for _, e in streams.read_all(gid, last_id=first[0][0])][0]["text"] == "c"

    async def run():
        return [e async for e in streams.follow(gid, block_ms=100, timeout_s=2)]

    followed = asyncio.run(run())
    assert [e["type"] for _, e in followed] == ["tokens", "tokens", "done"]
    import redis
    from django.conf import settings

    ttl = redis.Redis.from_url(settings.REDIS_URL).ttl(streams.stream_key(gid))
    assert 0 < ttl <= streams.TTL_S


def test_follow_gives_up_on_a_silent_stream():
    async def run():
        return [e async for e in streams.follow(uuid.uuid4(), block_ms=50, timeout_s=0.2)]

    assert asyncio.run(run()) == []
