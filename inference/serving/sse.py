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
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from fleet import redis_clients
from inference import wire
from inference.serving import stream_hub

KEEPALIVE = "keepalive"  # the tick's event type
TIMEOUT = stream_hub.TIMEOUT  # the stream stayed silent for idle_timeout_s: no terminal event came
KEEPALIVE_COMMENT = b": keep-alive\n\n"


async def follow(
    generation_id,
    *,
    owner: int | None,
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
        owner=owner,
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
    owner: int | None,
    last_id: str = "0",
    keepalive_s: float | None = 2.0,
    idle_timeout_s: float = 120.0,
    block_ms: int = 1000,
) -> AsyncIterator[list[tuple[str | None, dict]]]:
    """What `follow` yields, grouped: every event already there when the consumer looks
    (a verifier round's tokens arrive together), at least one per batch. `owner` is the
    verifier the Generation row names: its stream is the one read (see `_follow`)."""
    async for batch in _follow(
        [generation_id],
        [owner],
        [last_id or "0"],
        keepalive_s=keepalive_s,
        idle_timeout_s=idle_timeout_s,
        block_ms=block_ms,
    ):
        yield [(cursor, event) for _tag, cursor, event in batch]


async def _owner_now(generation_id) -> int | None:
    """The verifier the ledger (the Generation row) names now."""
    from asgiref.sync import sync_to_async

    from inference.models import Generation

    def lookup():
        row = Generation.objects.filter(pk=generation_id).values_list("verifier_id").first()
        return row[0] if row else None

    return await sync_to_async(lookup)()


async def _follow(
    generation_ids: list,
    owners: list,
    cursors: list[str],
    *,
    keepalive_s: float | None,
    idle_timeout_s: float,
    block_ms: int,
) -> AsyncIterator[list[tuple[int | None, str | None, dict]]]:
    """Batches of (index, entry id, event) of the streams of generation_ids[i] under the
    verifier owners[i], until each one's terminal event (or a timeout). A `requeued` event
    naming another owner switches that stream to the new owner's copy (same ids: it goes on
    from the same cursor) once the database agrees: a node's word alone moves nothing, and
    what the old owner writes after it is not read."""
    owners, cursors = list(owners), list(cursors)
    live = {i for i, owner in enumerate(owners) if owner is not None}
    for i in set(range(len(owners))) - live:  # never started anywhere: nothing to read
        yield [(i, None, dict(wire.error_event("the generation has no verifier")))]
    while live:
        keys = {wire.stream_key(owners[i], generation_ids[i]): i for i in sorted(live)}
        inner = _read(
            keys,
            {k: cursors[i] for k, i in keys.items()},
            keepalive_s,
            idle_timeout_s=idle_timeout_s,
            block_ms=block_ms,
        )
        moved: set[int] = set()
        try:
            async for batch in inner:
                out = []
                for tag, cursor, event in batch:
                    if tag in moved:
                        continue  # the old owner's writes after the move
                    out.append((tag, cursor, event))
                    if tag is None:
                        if event.get("type") == TIMEOUT:
                            yield out
                            return
                        continue
                    cursors[tag] = cursor or cursors[tag]
                    kind = event.get("type")
                    if kind in wire.TERMINAL_TYPES:
                        live.discard(tag)
                    elif kind == "requeued" and event.get("owner") not in (None, owners[tag]):
                        now = await _owner_now(generation_ids[tag])
                        if now is not None and now != owners[tag]:
                            owners[tag] = now
                            moved.add(tag)
                if out:
                    yield out
                if moved:
                    break
        finally:
            await inner.aclose()
        if not moved:
            return


async def _read(
    keys: dict[str, int],
    cursors: dict[str, str],
    keepalive_s: float | None,
    *,
    idle_timeout_s: float,
    block_ms: int,
) -> AsyncGenerator[list[tuple[int | None, str | None, dict]]]:
    """Batches of (tag, entry id, event) of `keys` from their cursors until each one's
    terminal event: read by the loop's `stream_hub` (one XREAD for every stream followed in
    this process), or by a pump of its own when another follower of this process already
    follows one of the same streams."""
    follower = stream_hub.Follower(keys, dict(cursors), idle_timeout_s=idle_timeout_s)
    hub = stream_hub.hub()
    if hub.add(follower, block_ms=block_ms):
        try:
            async for batch in _batches(follower.queue, keepalive_s, ends=len(keys)):
                yield [_triple(item) for item in batch]
        finally:
            hub.remove(follower)
        return
    queue: asyncio.Queue = asyncio.Queue()
    stop = asyncio.Event()
    pump = _pump_many(
        keys, dict(cursors), queue, stop, block_ms=block_ms, idle_timeout_s=idle_timeout_s
    )
    task = asyncio.create_task(pump)
    _pumps.add(task)
    task.add_done_callback(_pumps.discard)
    try:
        async for batch in _batches(queue, keepalive_s, ends=len(keys)):
            yield [_triple(item) for item in batch]
    finally:
        stop.set()  # the pump ends at its next read; never cancelled (see the module doc)


def _triple(item: tuple) -> tuple[int | None, str | None, dict]:
    """A queue item as (tag, entry id, event); a keep-alive tick is (None, event)."""
    return (None, None, item[-1]) if len(item) == 2 else item


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
    keys: dict[str, int],
    start: dict[str, str],
    queue: asyncio.Queue,
    stop: asyncio.Event,
    *,
    block_ms: int,
    idle_timeout_s: float,
) -> None:
    """A reader of its own for several streams on ONE connection (one XREAD over all keys):
    a request with n choices or a list of prompts holds one connection, not one per stream."""
    client = redis_clients.async_client()  # the loop's pool: no connection per request
    cursors: dict[Any, Any] = dict(start)
    index = keys
    quiet_since = time.monotonic()
    try:
        while cursors and not stop.is_set():
            reply: Any = await client.xread(cursors, count=100, block=block_ms)
            if not reply:
                if time.monotonic() - quiet_since > idle_timeout_s:
                    queue.put_nowait((None, None, {"type": TIMEOUT}))
                    return
                continue
            quiet_since = time.monotonic()
            for raw_key, entries in reply:
                key = wire.decode_id(raw_key)
                for entry_id, fields in entries:
                    cursors[key] = wire.decode_id(entry_id)
                    event = wire.decode_event(fields)
                    queue.put_nowait((index[key], cursors[key], event))
                    if event.get("type") in wire.TERMINAL_TYPES:
                        del cursors[key]
                        break
    except Exception as exc:  # handed to the consumer, raised there
        queue.put_nowait((None, None, exc))


async def follow_many(
    generation_ids: list,
    *,
    owners: list,
    keepalive_s: float | None = 2.0,
    idle_timeout_s: float = 120.0,
    block_ms: int = 1000,
) -> AsyncIterator[tuple[int | None, dict]]:
    """(i, event) for the events of generation_ids[i], interleaved as they come, until each
    stream's terminal event; keep-alive and timeout ticks as in `follow` (index None). A
    timeout ends them all."""
    async for batch in follow_many_batches(
        generation_ids,
        owners=owners,
        keepalive_s=keepalive_s,
        idle_timeout_s=idle_timeout_s,
        block_ms=block_ms,
    ):
        for item in batch:
            yield item


async def follow_many_batches(
    generation_ids: list,
    *,
    owners: list,
    keepalive_s: float | None = 2.0,
    idle_timeout_s: float = 120.0,
    block_ms: int = 1000,
) -> AsyncIterator[list[tuple[int | None, dict]]]:
    """What `follow_many` yields, grouped as `follow_batches` groups (a round's events of
    all the streams together); owners[i] is generation_ids[i]'s verifier."""
    async for batch in _follow(
        list(generation_ids),
        list(owners),
        ["0"] * len(generation_ids),
        keepalive_s=keepalive_s,
        idle_timeout_s=idle_timeout_s,
        block_ms=block_ms,
    ):
        yield [(tag, event) for tag, _cursor, event in batch]
