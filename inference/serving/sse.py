"""Following a generation's stream (`inference.wire`): the one `follow()`, used by the SSE
views of the REST API and of /v1.

It yields the stream's events until a terminal one, a keep-alive tick after each `keepalive_s`
of silence (the SSE views write it as a comment line), and gives up with a timeout event
after `idle_timeout_s` without any event, so nobody waits forever on a stream no worker
writes to. The loop's `stream_hub` reads every followed stream with ONE blocking XREAD on one
connection of the loop's pool (`fleet.redis_clients.async_client`); a second follower of a
stream already followed here reads on its own. `follow_batches` yields every event that
arrived together, so the SSE view writes a round's tokens in one chunk.

Writing the tick is what lets the server notice a client that hung up (daphne does not read
from a connection while it serves a request, so a silent stream would never learn that its
client left), and it keeps proxies from closing an idle stream while it waits in the queue.

The Redis reads run in a separate task that is never cancelled: it stops at its next read
(within `block_ms`) once the consumer is gone. Cancelling a redis.asyncio command (redis-py
8) while its connection is being set up can swallow the cancellation and leave the task
waiting forever, and a client that hangs up right after its request is exactly that case.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from fleet import redis_clients
from inference import wire
from inference.serving import stream_hub

KEEPALIVE = "keepalive"  # the tick's event type
TIMEOUT = stream_hub.TIMEOUT  # the stream stayed silent for idle_timeout_s: no terminal event came
KEEPALIVE_COMMENT = b": keep-alive\n\n"


async def _pump(
    key: str,
    cursor: str,
    queue: asyncio.Queue,
    stop: asyncio.Event,
    *,
    block_ms: int,
    idle_timeout_s: float,
) -> None:
    client = redis_clients.async_client()  # the loop's pool: no connection per request
    quiet_since = time.monotonic()
    try:
        while not stop.is_set():
            reply: Any = await client.xread({key: cursor}, count=100, block=block_ms)
            if not reply:
                if time.monotonic() - quiet_since > idle_timeout_s:
                    queue.put_nowait((None, {"type": TIMEOUT}))
                    return
                continue
            quiet_since = time.monotonic()
            for _key, entries in reply:
                for entry_id, fields in entries:
                    cursor = wire.decode_id(entry_id)
                    event = wire.decode_event(fields)
                    queue.put_nowait((cursor, event))
                    if event.get("type") in wire.TERMINAL_TYPES:
                        return
    except Exception as exc:  # handed to the consumer, raised there
        queue.put_nowait((None, exc))


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
    async for batch in follow_batches(
        generation_id,
        last_id=last_id,
        keepalive_s=keepalive_s,
        idle_timeout_s=idle_timeout_s,
        block_ms=block_ms,
    ):
        for item in batch:
            yield item


async def follow_batches(
    generation_id,
    *,
    last_id: str = "0",
    keepalive_s: float | None = 2.0,
    idle_timeout_s: float = 120.0,
    block_ms: int = 1000,
) -> AsyncIterator[list[tuple[str | None, dict]]]:
    """What `follow` yields, grouped: every event already there when the consumer looks
    (a verifier round's tokens arrive together), at least one per batch. Read by the loop's
    `stream_hub` (one XREAD for every stream followed in this process), or by a pump of its
    own when another follower of this process already follows the same stream."""
    key = wire.stream_key(generation_id)
    follower = stream_hub.Follower({key: 0}, {key: last_id or "0"}, idle_timeout_s=idle_timeout_s)
    hub = stream_hub.hub()
    if hub.add(follower, block_ms=block_ms):
        try:
            async for batch in _batches(follower.queue, keepalive_s, ends=1):
                yield [(item[1] if len(item) == 3 else None, item[-1]) for item in batch]
        finally:
            hub.remove(follower)
        return
    queue: asyncio.Queue = asyncio.Queue()
    stop = asyncio.Event()
    pump = _pump(key, last_id or "0", queue, stop, block_ms=block_ms, idle_timeout_s=idle_timeout_s)
    task = asyncio.create_task(pump)
    _pumps.add(task)
    task.add_done_callback(_pumps.discard)
    try:
        async for batch in _batches(queue, keepalive_s, ends=1):
            yield batch
    finally:
        stop.set()  # the pump ends at its next read; never cancelled (see the module doc)


async def _batches(queue: asyncio.Queue, keepalive_s: float | None, *, ends: int):
    """Lists of the queue's items as they come (all that are there at once), until `ends`
    terminal events or a timeout; a keep-alive tick after `keepalive_s` of silence. Items
    are tuples whose last element is the event (or an exception, raised here)."""
    while ends:
        try:
            first = await _next(queue, keepalive_s)
        except TimeoutError:
            yield [(None, {"type": KEEPALIVE})]
            continue
        batch = [first]
        while not queue.empty():
            batch.append(queue.get_nowait())
        out = []
        for item in batch:
            event = item[-1]
            if isinstance(event, Exception):
                raise event
            out.append(item)
            if event.get("type") == TIMEOUT:
                yield out
                return
            if event.get("type") in wire.TERMINAL_TYPES:
                ends -= 1
                if not ends:
                    break
        yield out


_pumps: set[asyncio.Task] = set()  # strong references, so running pumps are not collected


async def _next(queue: asyncio.Queue, timeout_s: float | None):
    """The queue's next item, or TimeoutError after `timeout_s` (None: no limit). Cheaper
    than `asyncio.wait_for`, which wraps every wait in a new task."""
    if not queue.empty():
        return queue.get_nowait()
    async with asyncio.timeout(timeout_s):
        return await queue.get()


async def _pump_many(
    keys: list[str],
    queue: asyncio.Queue,
    stop: asyncio.Event,
    *,
    block_ms: int,
    idle_timeout_s: float,
) -> None:
    """`_pump` for several streams on ONE connection (one XREAD over all keys): a request
    with n choices or a list of prompts holds one connection, not one per generation."""
    client = redis_clients.async_client()  # the loop's pool: no connection per request
    cursors: dict[Any, Any] = dict.fromkeys(keys, "0")
    index = {key: i for i, key in enumerate(keys)}
    quiet_since = time.monotonic()
    try:
        while cursors and not stop.is_set():
            reply: Any = await client.xread(cursors, count=100, block=block_ms)
            if not reply:
                if time.monotonic() - quiet_since > idle_timeout_s:
                    queue.put_nowait((None, {"type": TIMEOUT}))
                    return
                continue
            quiet_since = time.monotonic()
            for raw_key, entries in reply:
                key = wire.decode_id(raw_key)
                for entry_id, fields in entries:
                    cursors[key] = wire.decode_id(entry_id)
                    event = wire.decode_event(fields)
                    queue.put_nowait((index[key], event))
                    if event.get("type") in wire.TERMINAL_TYPES:
                        del cursors[key]
                        break
    except Exception as exc:  # handed to the consumer, raised there
        queue.put_nowait((None, exc))


async def follow_many(
    generation_ids: list,
    *,
    keepalive_s: float | None = 2.0,
    idle_timeout_s: float = 120.0,
    block_ms: int = 1000,
) -> AsyncIterator[tuple[int | None, dict]]:
    """(i, event) for the events of generation_ids[i], interleaved as they come, until each
    stream's terminal event; keep-alive and timeout ticks as in `follow` (index None). A
    timeout ends them all."""
    async for batch in follow_many_batches(
        generation_ids, keepalive_s=keepalive_s, idle_timeout_s=idle_timeout_s, block_ms=block_ms
    ):
        for item in batch:
            yield item


async def follow_many_batches(
    generation_ids: list,
    *,
    keepalive_s: float | None = 2.0,
    idle_timeout_s: float = 120.0,
    block_ms: int = 1000,
) -> AsyncIterator[list[tuple[int | None, dict]]]:
    """What `follow_many` yields, grouped as `follow_batches` groups (a round's events of
    all the streams together)."""
    keys = [wire.stream_key(g) for g in generation_ids]
    follower = stream_hub.Follower(
        {k: i for i, k in enumerate(keys)}, dict.fromkeys(keys, "0"), idle_timeout_s=idle_timeout_s
    )
    hub = stream_hub.hub()
    if hub.add(follower, block_ms=block_ms):
        try:
            async for batch in _batches(follower.queue, keepalive_s, ends=len(keys)):
                yield [(item[0], item[-1]) for item in batch]
        finally:
            hub.remove(follower)
        return
    queue: asyncio.Queue = asyncio.Queue()
    stop = asyncio.Event()
    pump = _pump_many(keys, queue, stop, block_ms=block_ms, idle_timeout_s=idle_timeout_s)
    task = asyncio.create_task(pump)
    _pumps.add(task)
    task.add_done_callback(_pumps.discard)
    try:
        async for batch in _batches(queue, keepalive_s, ends=len(keys)):
            yield batch
    finally:
        stop.set()
