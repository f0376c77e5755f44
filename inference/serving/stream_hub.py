"""ONE reader of every followed generation stream, per event loop (`sse.follow_batches`,
`sse.follow_many_batches`).

A follower used to run its own blocking XREAD: with 32 open streams, a verifier round that
publishes 32 events woke 32 readers, each paying a Redis round trip for its one event. The
hub reads them all with one XREAD over every followed key and hands each follower its
events (a round of the whole batch: one round trip).

A new follower must not wait for the hub's current blocking read to end (up to `block_ms`):
the XREAD also reads the hub's own wake stream, and a follower that joins appends to it, so
the read returns at once and the next one includes the new key. One wake per read: the
followers that join while a wake is on its way ride on it (32 clients arriving together cost
one wake, not 32 Redis round trips).

The hub's task is never cancelled (see `sse`'s module doc: cancelling a redis.asyncio
command can hang); it ends at its next read once nobody follows anything. A follower leaves
by removing its keys; its events that were in flight are dropped. A key already followed
here by another follower (a second client on the same generation, a resume with
Last-Event-ID) is not taken: that follower reads on its own (`add` answers False).
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from typing import Any

from fleet import redis_clients
from inference import wire

TIMEOUT = "timeout"
WAKE_TTL_S = 3600


class Follower:
    """What one consumer follows: stream keys (each with a tag the consumer knows it by and
    its cursor), and the queue the hub puts (tag, entry id, event) into -- or (None, None,
    exception) when the reads fail, or (None, None, {"type": "timeout"}) after
    `idle_timeout_s` without an event on any of its keys."""

    def __init__(self, keys: dict[str, Any], cursors: dict[str, str], *, idle_timeout_s: float):
        self.tags = keys
        self.cursors = cursors
        self.idle_timeout_s = idle_timeout_s
        self.queue: asyncio.Queue = asyncio.Queue()
        self.last = time.monotonic()


class Hub:
    def __init__(self, *, block_ms: int = 1000):
        self.block_ms = block_ms
        self.keys: dict[str, Follower] = {}
        self.wake_key = f"tandem:web:wake:{uuid.uuid4().hex}"
        self.wake_cursor = "0"
        self.task: asyncio.Task | None = None
        self.reads = 0  # XREADs done (for tests and benches)
        self.waking = False  # a wake is on its way: the read it ends takes every new key
        self.wakes = 0  # wakes sent (for tests and benches)
        self.ttl_set = -float("inf")  # when the wake stream's TTL was last set

    def add(self, follower: Follower, *, block_ms: int | None = None) -> bool:
        if any(key in self.keys for key in follower.tags):
            return False
        for key in follower.tags:
            self.keys[key] = follower
        if block_ms is not None:
            self.block_ms = min(self.block_ms, block_ms)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run())
            _tasks.add(self.task)
            self.task.add_done_callback(_tasks.discard)
        elif not self.waking:  # it is blocked in a read without this key: end that read now
            self.waking = True
            wake = asyncio.create_task(self._wake())
            _tasks.add(wake)
            wake.add_done_callback(_tasks.discard)
        return True

    def remove(self, follower: Follower) -> None:
        for key in follower.tags:
            if self.keys.get(key) is follower:
                del self.keys[key]

    async def _wake(self) -> None:
        """One XADD; its TTL is set with the first wake and again once it is half gone (a
        pipeline of the two commands cost twice the CPU of one, on every request)."""
        self.wakes += 1
        client = redis_clients.async_client()
        now = time.monotonic()
        try:
            if now - self.ttl_set > WAKE_TTL_S / 2:
                self.ttl_set = now
                pipe = client.pipeline(transaction=False)
                pipe.xadd(self.wake_key, {"w": "1"}, maxlen=16, approximate=True)
                pipe.expire(self.wake_key, WAKE_TTL_S)
                await pipe.execute()
            else:
                await client.xadd(self.wake_key, {"w": "1"}, maxlen=16, approximate=True)
        except Exception:  # the hub's own read fails the same way and tells the followers
            pass

    async def _run(self) -> None:
        client = redis_clients.async_client()  # the loop's pool: no connection per request
        try:
            while self.keys:
                self.waking = False  # this read takes every key there is now
                streams: dict[Any, Any] = {self.wake_key: self.wake_cursor}
                for key, follower in self.keys.items():
                    streams[key] = follower.cursors[key]
                reply: Any = await client.xread(streams, count=100, block=self.block_ms)
                self.reads += 1
                now = time.monotonic()
                for raw_key, entries in reply or ():
                    self._deliver(wire.decode_id(raw_key), entries, now)
                for follower in {f for f in self.keys.values() if now - f.last > f.idle_timeout_s}:
                    self.remove(follower)
                    follower.queue.put_nowait((None, None, {"type": TIMEOUT}))
        except Exception as exc:  # handed to every follower, raised there
            for follower in set(self.keys.values()):
                follower.queue.put_nowait((None, None, exc))
            self.keys.clear()

    def _deliver(self, key: str, entries, now: float) -> None:
        if key == self.wake_key:
            self.wake_cursor = wire.decode_id(entries[-1][0])
            return
        follower = self.keys.get(key)
        if follower is None:  # it left meanwhile
            return
        follower.last = now
        tag = follower.tags[key]
        for entry_id, fields in entries:
            cursor = wire.decode_id(entry_id)
            follower.cursors[key] = cursor
            event = wire.decode_event(fields)
            follower.queue.put_nowait((tag, cursor, event))
            if event.get("type") in wire.TERMINAL_TYPES:
                del self.keys[key]  # its stream ended: not read again
                return


_tasks: set[asyncio.Task] = set()  # strong references, so running tasks are not collected
_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub] = weakref.WeakKeyDictionary()


def hub() -> Hub:
    """The running event loop's hub."""
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        found = _hubs[loop] = Hub()
    return found
