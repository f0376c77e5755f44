"""inference.serving.sse.follow: events, keep-alive ticks while silent, a timeout at the end."""

import asyncio
import threading
import time
import uuid

from inference import wire
from inference.serving import sse


def collect(gid, **kwargs):
    async def run():
        return [event["type"] async for _id, event in sse.follow(gid, **kwargs)]

    return asyncio.run(run())


def test_ticks_while_silent_then_the_events():
    gid = uuid.uuid4()

    def later():
        time.sleep(0.35)
        wire.publish(gid, wire.tokens_event([97], "a", 1))
        wire.publish(gid, wire.done_event("stop", 1, 1))

    threading.Thread(target=later).start()
    kinds = collect(gid, keepalive_s=0.1, block_ms=50)
    assert kinds[-2:] == ["tokens", "done"]
    assert set(kinds[:-2]) == {sse.KEEPALIVE} and len(kinds) >= 4


def test_a_stream_that_stays_silent_ends_with_a_timeout():
    kinds = collect(uuid.uuid4(), keepalive_s=None, idle_timeout_s=0.2, block_ms=50)
    assert kinds == [sse.TIMEOUT]
