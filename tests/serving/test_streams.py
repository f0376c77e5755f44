"""inference.wire's token streams against the test run's real Redis, followed with the one
`follow()` (inference.serving.sse)."""

import asyncio
import uuid

from fleet import redis_clients
from inference import wire
from inference.serving import sse


def test_publish_read_all_and_follow_end_after_done():
    gid, node = uuid.uuid4(), 7
    wire.publish(gid, wire.tokens_event([1, 2], "ab", 2), node=node)
    first = wire.read_all(gid, node=node)
    wire.publish_many([(gid, wire.tokens_event([3], "c", 3))], node=node)
    wire.publish(gid, wire.done_event("length", 4, 3), node=node)
    events = wire.read_all(gid, node=node)
    assert [e["type"] for _, e in events] == ["tokens", "tokens", "done"]
    assert wire.collect_text(events) == "abc"
    assert [e for _, e in wire.read_all(gid, node=node, last_id=first[0][0])][0]["text"] == "c"
    assert wire.read_all(gid, node=8) == []  # another verifier's key: nothing

    async def run(**kwargs):
        follow = sse.follow(gid, owner=node, block_ms=100, idle_timeout_s=2, **kwargs)
        return [e async for e in follow]

    followed = asyncio.run(run(keepalive_s=None))
    assert [e["type"] for _, e in followed] == ["tokens", "tokens", "done"]
    assert [entry_id for entry_id, _ in followed] == [entry_id for entry_id, _ in events]
    resumed = asyncio.run(run(keepalive_s=None, last_id=first[0][0]))
    assert [e["type"] for _, e in resumed] == ["tokens", "done"]
    ttl = redis_clients.client().ttl(wire.stream_key(node, gid))
    assert 0 < ttl <= wire.TTL_S


def test_follow_gives_up_on_a_silent_stream():
    async def run():
        follow = sse.follow(
            uuid.uuid4(), owner=1, keepalive_s=None, block_ms=50, idle_timeout_s=0.2
        )
        return [e async for e in follow]

    assert asyncio.run(run()) == [(None, {"type": sse.TIMEOUT})]
