"""The fleet feed over a real socket (channels' WebsocketCommunicator, the Redis channel layer):
a snapshot on subscribing, then one delta per tick with the figures of the rows in view; a
client that lost its place asks again. Authorisation is the live socket's, unchanged."""

import json
import time

import pytest
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from fleet.nodes.models import Node
from fleet.telemetry import feed
from fleet.telemetry.aggregator import Aggregator
from fleet.telemetry.consumers import MAX_VIEW
from fleet.telemetry.deltas import FIG_FIELDS
from fleet.telemetry.ingest import encode
from fleet.telemetry.registry import load_registry
from tests.telemetry import factories as f
from tests.telemetry.test_consumers import _refused_with, _socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@pytest.fixture(autouse=True)
def _fresh_layer_and_feed():
    """A channel layer per test (its locks belong to one event loop), and no feed left in
    Redis by an earlier test (its rows would name that test's nodes)."""
    import redis as redis_lib
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    redis_lib.Redis.from_url(settings.REDIS_URL).delete(feed.FEED_KEY, feed.FIGS_KEY)
    yield
    channel_layers.backends.clear()


@sync_to_async
def _world(n: int = 3):
    p = f.pipeline()
    nodes = []
    for i in range(n):
        node, token = f.node(name=f"gpu-{i + 1}")
        f.place(node, p, "verify")
        nodes.append((node, token))
    return p, nodes


class Ticker:
    """One aggregator (one publisher, one epoch) ticked by hand through the real layer."""

    def __init__(self) -> None:
        self.agg = Aggregator()

    async def tick(self, samples=()) -> None:
        self.agg.set_registry(await sync_to_async(load_registry)())
        now = time.time()
        for node, token, sample in samples:
            entry = encode(node.id, sample, key=f.key_of(node.id, token))
            assert self.agg.ingest_entry(entry, now=now)
        r = aioredis.from_url(settings.REDIS_URL)
        await self.agg._tick(r, get_channel_layer(), now)
        await r.aclose()


async def _subscribed(user):
    comm = await _socket("/ws/live/", user)
    assert (await comm.connect())[0]
    await comm.send_json_to({"action": "subscribe", "topic": "fleet"})
    assert await comm.receive_json_from(timeout=5) == {"type": "subscribed", "group": "fleet"}
    return comm


async def _next(comm, kind: str) -> dict:
    for _ in range(20):
        msg = await comm.receive_json_from(timeout=5)
        if msg["type"] == kind:
            return msg
    raise AssertionError(f"no {kind}")


async def test_snapshot_then_deltas_with_the_figures_of_the_rows_in_view(viewer):
    p, nodes = await _world(3)
    (a, a_token), (b, b_token), _ = nodes
    comm = await _subscribed(viewer)
    snap = await comm.receive_json_from(timeout=5)  # nobody published yet: from the database
    assert snap["type"] == "fleet.snapshot" and snap["epoch"] == "" and snap["seq"] == 0
    assert sorted(r[1] for r in snap["rows"]) == ["gpu-1", "gpu-2", "gpu-3"]

    ticker = Ticker()
    await ticker.tick([(a, a_token, f.verify_sample(ts=time.time(), power_w=300.0))])
    # a publisher's first tick starts another epoch: the socket gets its snapshot instead
    snap = await comm.receive_json_from(timeout=5)
    assert snap["type"] == "fleet.snapshot" and snap["seq"] == 1
    first = {"epoch": snap["epoch"]}
    assert first["epoch"] == vars(ticker.agg)["fleet_feed"].epoch
    assert snap["totals"]["nodes"] == 3 and snap["pipes"] == [[p.id, p.name]]

    await comm.send_json_to({"action": "view", "ids": [a.id, b.id]})
    figs = (await _next(comm, "fleet.figs"))["figs"]
    assert set(figs) == {str(a.id), str(b.id)}  # b has no telemetry: its figures are empty
    assert dict(zip(FIG_FIELDS, figs[str(a.id)], strict=True))["power_w"] == 300
    assert figs[str(b.id)][0] is None

    # a state change and a figure that moved: seq 2 has the row and a's figures, nothing else
    await sync_to_async(Node.objects.filter(pk=b.id).update)(state="draining")
    await ticker.tick([(a, a_token, f.verify_sample(ts=time.time() + 0.01, power_w=900.0))])
    delta = await _next(comm, "fleet.update")
    assert delta["seq"] == 2 and delta["epoch"] == first["epoch"]
    assert [(r[0], r[2]) for r in delta["rows"]] == [(b.id, "draining")]
    assert list(delta["figs"]) == [str(a.id)]  # only the rows in view, only what moved
    assert delta["figs"][str(a.id)][0] == 600  # the 5 s window's mean of 300 W and 900 W
    assert delta["gone"] == [] and "pipes" not in delta

    # nothing moved: the delta carries the headline only
    await ticker.tick()
    quiet = await _next(comm, "fleet.update")
    assert quiet["seq"] == 3 and quiet["rows"] == [] and "figs" not in quiet
    await comm.disconnect()


async def test_a_late_joiner_gets_the_publishers_snapshot_and_the_next_seq(viewer):
    p, nodes = await _world(2)
    ticker = Ticker()
    for _ in range(3):
        await ticker.tick()
    comm = await _subscribed(viewer)
    snap = await comm.receive_json_from(timeout=5)
    assert snap["type"] == "fleet.snapshot" and snap["seq"] == 3
    assert snap["epoch"] == vars(ticker.agg)["fleet_feed"].epoch and len(snap["rows"]) == 2
    await sync_to_async(Node.objects.filter(pk=nodes[0][0].id).delete)()
    await ticker.tick()
    delta = await _next(comm, "fleet.update")
    assert delta["seq"] == 4 and delta["gone"] == [nodes[0][0].id]
    await comm.disconnect()


async def test_a_gap_in_the_ticks_brings_a_snapshot_not_a_delta(viewer):
    """Ticks the channel layer dropped (a full queue): the socket starts over from Redis."""
    await _world(2)
    ticker = Ticker()
    await ticker.tick()
    comm = await _subscribed(viewer)
    assert (await comm.receive_json_from(timeout=5))["seq"] == 1
    await ticker.tick()
    assert (await _next(comm, "fleet.update"))["seq"] == 2
    epoch = vars(ticker.agg)["fleet_feed"].epoch
    await ticker.tick()  # seq 3 is stored in Redis ...
    await _next(comm, "fleet.update")
    lost = {"type": feed.TICK_EVENT, "epoch": epoch, "seq": 5, "text": '{"type":"fleet.update"}'}
    await get_channel_layer().group_send("fleet", lost)  # ... and 4 never reached this socket
    snap = await comm.receive_json_from(timeout=5)
    assert snap["type"] == "fleet.snapshot" and (snap["epoch"], snap["seq"]) == (epoch, 3)
    await comm.disconnect()


async def test_fleet_actions_are_checked(viewer):
    await _world(1)
    comm = await _socket("/ws/live/", viewer)
    assert (await comm.connect())[0]
    await comm.send_json_to({"action": "view", "ids": [1]})
    assert (await comm.receive_json_from(timeout=5))["code"] == 400  # not subscribed yet
    await comm.send_json_to({"action": "subscribe", "topic": "fleet"})
    await _next(comm, "fleet.snapshot")
    for bad in ({"ids": "1,2"}, {"ids": [1, "2"]}, {"ids": [True]}, {}):
        await comm.send_json_to({"action": "view", **bad})
        assert (await comm.receive_json_from(timeout=5))["code"] == 400, bad
    await comm.send_json_to({"action": "view", "ids": list(range(MAX_VIEW + 1))})
    assert (await comm.receive_json_from(timeout=5))["code"] == 413
    await comm.send_json_to({"action": "snapshot"})  # the subscription's snapshot was just sent
    assert (await comm.receive_json_from(timeout=5))["code"] == 429
    await comm.send_json_to({"action": "view", "ids": []})
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_authorisation_is_unchanged(outsider):
    assert await _refused_with("/ws/live/") == 4401
    assert await _refused_with("/ws/live/", outsider) == 4403


async def test_the_wall_keeps_its_rowless_summary(viewer):
    await _world(2)
    comm = await _socket("/ws/wall/", viewer)
    assert (await comm.connect())[0]
    await Ticker().tick()
    msg = await _next(comm, "fleet.update")
    assert "nodes" not in msg and "rows" not in msg and msg["totals"]["nodes"] == 2
    assert [p["name"] for p in msg["pipelines"]] == ["llama-pair"]
    await comm.disconnect()


async def test_the_stored_feed_expires_without_a_publisher():
    await _world(1)
    await Ticker().tick()
    r = aioredis.from_url(settings.REDIS_URL)
    try:
        for key in (feed.FEED_KEY, feed.FIGS_KEY):
            assert 0 < await r.pttl(key) <= feed.FEED_TTL_MS
        stored = await feed.read_snapshot(r)
        assert stored is not None
        epoch, seq, text = stored
        assert json.loads(text)["seq"] == seq == 1 and epoch
    finally:
        await r.aclose()
