"""A fleet page sorted by a live figure over a real socket: it says which figure (an action, or
in its subscription), gets that figure of every node at once and then every SORT_EVERY_S with
the ticks, never more often; a bad key is refused."""

import asyncio
import time

import pytest

from fleet.telemetry import consumers, feed
from tests.telemetry import factories as f
from tests.telemetry.test_consumers import _socket
from tests.telemetry.test_fleet_feed import (  # noqa: F401 (a fixture)
    Ticker,
    _fresh_layer_and_feed,
    _next,
    _subscribed,
    _world,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@pytest.fixture(autouse=True)
def _no_shared_column():
    feed._columns.clear()  # a column read by an earlier test (other nodes) is not reused
    yield
    feed._columns.clear()


async def _figures(ticker: Ticker, nodes, powers) -> None:
    await ticker.tick(
        [
            (node, token, f.verify_sample(ts=time.time(), power_w=w))
            for (node, token), w in zip(nodes, powers, strict=True)
        ]
    )


async def test_a_sort_gets_every_figure_at_once_then_every_sort_every_s(viewer, monkeypatch):
    _, nodes = await _world(3)
    (a, _), (b, _), (c, _) = nodes
    ticker = Ticker()
    await _figures(ticker, nodes[:2], [300.0, 700.0])  # c has no sample: not in the column
    comm = await _subscribed(viewer)
    await _next(comm, "fleet.snapshot")
    await comm.send_json_to({"action": "sort", "key": "power"})
    column = await _next(comm, "fleet.sort")
    assert column["key"] == "power"
    assert dict(zip(column["ids"], column["vals"], strict=True)) == {a.id: 300, b.id: 700}
    # the ticks carry their deltas; the next column comes SORT_EVERY_S after this one
    monkeypatch.setattr(consumers, "SORT_EVERY_S", 3600.0)
    await ticker.tick()
    assert (await comm.receive_json_from(timeout=5))["type"] == "fleet.update"
    assert await comm.receive_nothing(timeout=0.3)
    monkeypatch.setattr(consumers, "SORT_EVERY_S", 0.0)
    feed._columns.clear()
    await _figures(ticker, nodes[:1], [500.0])
    assert (await comm.receive_json_from(timeout=5))["type"] == "fleet.update"
    column = await _next(comm, "fleet.sort")
    assert dict(zip(column["ids"], column["vals"], strict=True))[a.id] == 400  # 300 and 500
    # sorted by a field of the row again: no more columns
    await comm.send_json_to({"action": "sort", "key": None})
    await ticker.tick()
    assert (await comm.receive_json_from(timeout=5))["type"] == "fleet.update"
    assert await comm.receive_nothing(timeout=0.3)
    assert c.id not in column["ids"]
    await comm.disconnect()


async def test_the_subscription_carries_the_sort_and_its_column_comes_before_the_rows(viewer):
    _, nodes = await _world(2)
    await _figures(Ticker(), nodes, [100.0, 200.0])
    comm = await _socket("/ws/live/", viewer)
    assert (await comm.connect())[0]
    await comm.send_json_to({"action": "subscribe", "topic": "fleet", "sort": "power"})
    assert (await comm.receive_json_from(timeout=5))["type"] == "subscribed"
    column = await comm.receive_json_from(timeout=5)
    assert column["type"] == "fleet.sort" and sorted(column["vals"]) == [100, 200]
    assert (await comm.receive_json_from(timeout=5))["type"] == "fleet.snapshot"
    # other sorts at once: not a column per click, the last one's with a tick a second on
    await comm.send_json_to({"action": "sort", "key": "util"})
    await comm.send_json_to({"action": "sort", "key": "acc"})
    assert await comm.receive_nothing(timeout=0.3)
    await asyncio.sleep(consumers.SORT_MIN_INTERVAL_S)
    await Ticker().tick()
    assert (await _next(comm, "fleet.sort"))["key"] == "acc"
    await comm.disconnect()


async def test_a_sort_is_checked(viewer):
    await _world(1)
    comm = await _socket("/ws/live/", viewer)
    assert (await comm.connect())[0]
    await comm.send_json_to({"action": "sort", "key": "power"})
    assert (await comm.receive_json_from(timeout=5))["code"] == 400  # not subscribed yet
    await comm.send_json_to({"action": "subscribe", "topic": "fleet", "sort": "name"})
    assert (await comm.receive_json_from(timeout=5))["type"] == "subscribed"
    assert (await comm.receive_json_from(timeout=5))["code"] == 400  # not a live figure
    assert (await comm.receive_json_from(timeout=5))["type"] == "fleet.snapshot"
    for bad in ("state", "", 3, ["tps"], {"k": 1}):
        await comm.send_json_to({"action": "sort", "key": bad})
        assert (await comm.receive_json_from(timeout=5))["code"] == 400, bad
    await comm.disconnect()
