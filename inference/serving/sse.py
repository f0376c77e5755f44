"""Following a generation's stream for a server-sent-events response.

Like `inference.wire.follow`, plus a keep-alive tick after each `keepalive_s` of silence;
the SSE views write the tick as a comment line. Writing is what lets the server notice a
client that hung up (daphne does not read from a connection while it serves a request, so a
silent stream would never learn that its client left), and it keeps proxies from closing an
idle stream while the generation waits in the queue.

The Redis reads run in a separate task that is never cancelled: it stops at its next read
(within `block_ms`) once the consumer is gone. Cancelling a redis.asyncio command (redis-py
8) while its connection is being set up can swallow the cancellation and leave the task
waiting forever, and a client that hangs up right after its request is exactly that case.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import redis.asyncio as aioredis

from inference import wire

KEEPALIVE = "keepalive"  # the tick's event type
TIMEOUT = "timeout"  # the stream stayed silent for idle_timeout_s: no terminal event came
KEEPALIVE_COMMENT = b": keep-alive\n\n"


def _text(raw) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


async def _pump(
    key: str,
    cursor: str,
    queue: asyncio.Queue,
    stop: asyncio.Event,
    *,
    block_ms: int,
    idle_timeout_s: float,
) -> None:
    client = aioredis.Redis.from_url(wire.redis_url())
    quiet_since = time.monotonic()
    try:
        while not stop.is_set():
            reply = await client.xread({key: cursor}, count=100, block=block_ms)
            if not reply:
                if time.monotonic() - quiet_since > idle_timeout_s:
                    queue.put_nowait((None, {"type": TIMEOUT}))
                    return
                continue
            quiet_since = time.monotonic()
            for _key, entries in reply:
                for entry_id, fields in entries:
                    cursor = _text(entry_id)
                    event = json.loads(_text(fields.get(b"e", fields.get("e"))))
                    queue.put_nowait((cursor, event))
                    if event.get("type") in wire.TERMINAL_TYPES:
                        return
    except Exception as exc:  # handed to the consumer, raised there
        queue.put_nowait((None, exc))
    finally:
        await client.aclose()


async def follow(
    generation_id,
    *,
    last_id: str = "0",
    keepalive_s: float | None = 2.0,
    idle_timeout_s: float = 120.0,
    block_ms: int = 1000,
) -> AsyncIterator[tuple[str | None, dict]]:
    """(id, event) until a terminal event; (None, {"type": "keepalive"}) ticks while silent;
    a final (None, {"type": "timeout"}) if the stream went quiet for `idle_timeout_s`.

    Keep `block_ms` under redis-py's socket timeout (5 s by default)."""
    queue: asyncio.Queue = asyncio.Queue()
    stop = asyncio.Event()
    key = wire.stream_key(generation_id)
    pump = _pump(key, last_id or "0", queue, stop, block_ms=block_ms, idle_timeout_s=idle_timeout_s)
    task = asyncio.create_task(pump)
    _pumps.add(task)
    task.add_done_callback(_pumps.discard)
    try:
        while True:
            try:
                entry_id, event = await asyncio.wait_for(queue.get(), keepalive_s)
            except TimeoutError:
                yield None, {"type": KEEPALIVE}
                continue
            if isinstance(event, Exception):
                raise event
            yield entry_id, event
            if event.get("type") in wire.TERMINAL_TYPES or event.get("type") == TIMEOUT:
                return
    finally:
        stop.set()  # the pump ends at its next read; never cancelled (see the module doc)


_pumps: set[asyncio.Task] = set()  # strong references, so running pumps are not collected
