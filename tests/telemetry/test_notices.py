"""A node's state change reaches the fleet view within 2 s: the service posts a notice after
commit and the running aggregators reload that node on their next tick (their full registry
refresh is every 30 s, so without the notice this takes up to 30 s)."""

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from fleet.nodes.services import node_mark_lost, node_retire
from fleet.telemetry.aggregator import REGISTRY_REFRESH_S, Aggregator
from tests.telemetry import factories as f
from tests.telemetry.test_consumers import _fresh_channel_layer, _socket  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


async def _until(comm, want, timeout: float) -> bool:
    """Read the fleet feed (a snapshot, then deltas: rows as [id, name, state, ...], gone
    ids) until a message satisfies `want(message)`; False if none did in time."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            msg = await comm.receive_json_from(timeout=left)
        except TimeoutError:
            return False
        if msg.get("type") in ("fleet.snapshot", "fleet.update") and want(msg):
            return True
    return False


def _state_is(node_id: int, state: str):
    return lambda msg: any(r[0] == node_id and r[2] == state for r in msg.get("rows") or [])


async def test_a_state_change_reaches_the_fleet_view_within_2_s(viewer):
    assert REGISTRY_REFRESH_S >= 10  # what the notice saves waiting for
    v, _ = await sync_to_async(f.node)(name="gpu-1")
    other, _ = await sync_to_async(f.node)(name="gpu-2")
    comm = await _socket("/ws/live/", viewer)
    assert (await comm.connect())[0]
    await comm.send_json_to({"action": "subscribe", "topic": "fleet"})
    assert (await comm.receive_json_from(timeout=5))["type"] == "subscribed"
    stop = asyncio.Event()
    agg = Aggregator(tick_s=0.2)
    task = asyncio.create_task(agg.run(redis_url=settings.REDIS_URL, stop=stop))
    try:
        assert await _until(comm, _state_is(v.id, "online"), 10)
        changed = time.monotonic()
        await sync_to_async(node_mark_lost)(node=v)
        assert await _until(comm, _state_is(v.id, "lost"), 5)
        assert time.monotonic() - changed <= 2.0
        changed = time.monotonic()
        await sync_to_async(node_retire)(node=other)
        assert await _until(comm, lambda msg: other.id in (msg.get("gone") or []), 5)
        assert time.monotonic() - changed <= 2.0  # retired: off the fleet view
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)
        await comm.disconnect()


async def test_a_move_reaches_the_fleet_view_within_2_s(viewer, admin):
    """A node moved to another pipeline shows there at once (the move posts a notice too)."""
    from fleet.pipelines.node_actions import node_move

    a, b = await sync_to_async(f.pipeline)("pair-a"), await sync_to_async(f.pipeline)("pair-b")
    n, _ = await sync_to_async(f.node)(name="gpu-move")
    await sync_to_async(f.place)(n, a, "verify")
    comm = await _socket("/ws/live/", viewer)
    assert (await comm.connect())[0]
    await comm.send_json_to({"action": "subscribe", "topic": "fleet"})
    assert (await comm.receive_json_from(timeout=5))["type"] == "subscribed"
    stop = asyncio.Event()
    agg = Aggregator(tick_s=0.2)
    task = asyncio.create_task(agg.run(redis_url=settings.REDIS_URL, stop=stop))

    def in_pipeline(pipeline):
        return lambda msg: any(r[0] == n.id and r[4] == pipeline.id for r in msg.get("rows") or [])

    try:
        assert await _until(comm, in_pipeline(a), 10)
        moved = time.monotonic()
        await sync_to_async(node_move)(node_id=n.id, to_pipeline_id=b.id, actor=admin, force=True)
        assert await _until(comm, in_pipeline(b), 5)
        assert time.monotonic() - moved <= 2.0
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)
        await comm.disconnect()
