"""inference.wire's token streams against the test run's real Redis, followed with the one
`follow()` (inference.serving.sse)."""

import asyncio
import uuid

import pytest
from asgiref.sync import sync_to_async

from fleet import redis_clients
from inference import wire
from inference.models import Generation
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


@pytest.mark.django_db(transaction=True)
def test_a_follower_moves_only_to_the_owner_the_ledger_names(serving_pair):
    """A `requeued` event naming a new owner moves the follower only once the Generation row
    names it: the old verifier's word alone (a forged move, or writes after the move) is
    not read."""
    g, v1, v2, v3 = serving_pair
    wire.publish(g.pk, wire.tokens_event([1], "a", 1), node=v1)
    forged = {**wire.requeued_event("forged"), "owner": v3}
    wire.publish(g.pk, forged, node=v1)  # v1 says v3 owns it now: the row does not
    wire.publish(g.pk, wire.done_event("stop", 1, 9), node=v3)

    async def run():
        return [e async for e in sse.follow(g.pk, owner=v1, keepalive_s=None, block_ms=50)]

    async def later():
        task = asyncio.create_task(run())
        await asyncio.sleep(0.3)
        move = Generation.objects.filter(pk=g.pk).update
        await sync_to_async(move)(verifier_id=v2)  # the ledger's re-route
        await asyncio.to_thread(wire.move_stream, g.pk, old=v1, new=v2, reason="v1 lost")
        wire.publish(g.pk, wire.tokens_event([2], "INJECTED", 2), node=v1)  # after the move
        wire.publish(g.pk, wire.tokens_event([3], "b", 2), node=v2)
        wire.publish(g.pk, wire.done_event("stop", 1, 2), node=v2)
        return await task

    events = [e for _, e in asyncio.run(later())]
    assert [e["type"] for e in events] == ["tokens", "requeued", "requeued", "tokens", "done"]
    assert wire.collect_text([(None, e) for e in events]) == "ab"
    assert [e["type"] for _, e in wire.read_all(g.pk, node=v2)][-1] == "done"


@pytest.fixture
def serving_pair():
    from fleet.nodes.services import node_register
    from fleet.pipelines.models import Pipeline
    from tests.worker.helpers import profile

    pipeline = Pipeline.objects.create(name="moves", target_model="t", draft_model="d")
    v1, v2, v3 = (
        node_register(name=f"moves-v{i}", profile=profile(), roles=["verify"])[0].pk
        for i in (1, 2, 3)
    )
    g = Generation.objects.create(
        pipeline=pipeline, prompt="hi", prompt_tokens=[1], params={}, verifier_id=v1
    )
    return g, v1, v2, v3
