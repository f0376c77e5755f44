"""The channel layer under the live console: a socket with nothing to say stays open.

channels_redis waits for a socket's messages with a blocking BZPOPMIN of `brpop_timeout` (5 s);
redis-py 8 reads replies with a 5 s socket timeout by default. With both at 5 s an idle socket's
wait raced the read timeout and, under load, lost: the consumer died with a TimeoutError and the
server dropped the websocket (1006) after every 5 s of quiet, so a wall whose feed had stopped
reconnected again and again instead of staying connected and saying so.
"""

import asyncio
from typing import cast

import pytest
from channels.layers import channel_layers, get_channel_layer
from channels_redis.core import RedisChannelLayer
from channels_redis.utils import create_pool
from django.conf import settings


@pytest.fixture(autouse=True)
def _fresh_channel_layer():
    channel_layers.backends.clear()  # a layer's receive lock belongs to one event loop
    yield
    channel_layers.backends.clear()


def test_the_layers_read_timeout_outlasts_its_blocking_wait():
    config = cast(dict, settings.CHANNEL_LAYERS["default"]["CONFIG"])
    (host,) = config["hosts"]
    pool = create_pool(host)
    connection = pool.make_connection()
    assert connection.socket_timeout is not None
    assert connection.socket_timeout >= RedisChannelLayer.brpop_timeout + 10


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_receive_on_an_idle_channel_outlives_the_blocking_wait():
    """Through the configured layer and the real Redis: nothing arrives for longer than one
    BZPOPMIN, and the receive is still waiting (not failed), then gets the next message."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    waiting = asyncio.ensure_future(layer.receive(channel))
    try:
        await asyncio.sleep(RedisChannelLayer.brpop_timeout * 2 + 1)
        assert not waiting.done(), waiting.exception() if waiting.done() else None
        await layer.send(channel, {"type": "telemetry.push", "text": "{}"})
        assert (await asyncio.wait_for(waiting, timeout=5))["text"] == "{}"
    finally:
        waiting.cancel()
