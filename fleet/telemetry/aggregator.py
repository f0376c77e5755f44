"""The telemetry aggregator (`manage.py run_aggregator`, one process per deployment).

It reads the signed samples off the Redis stream in batches, keeps the live state of every
node (a sliding window of its samples) and derives pipeline and fleet figures from it. Every
`tick_s` (0.5 s) it sends ONE message per websocket group (fleet, wall, and only those
pipeline-<id> / node-<id> groups somebody subscribed to), writes the live snapshot to Redis
for first page renders and /metrics, and at each 10 s / 5 min boundary writes rollups.

The core (`ingest_entry`, `build`, `close_buckets`) is synchronous and clock-injected, in
`aggregation.py`, so tests drive it directly; this module is the runner around it: the
asyncio loop, leader election, sending, and the database writes (registry, rollups).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid

from asgiref.sync import sync_to_async

from fleet.redis_clients import REFRESH_LEADER_LOCK
from fleet.telemetry import feed, payloads
from fleet.telemetry.aggregation import Aggregation
from fleet.telemetry.ingest import STREAM
from fleet.telemetry.registry import Registry, load_registry
from fleet.telemetry.snapshot import INTEREST_KEY, LIVE_KEY

log = logging.getLogger(__name__)

LEADER_KEY = "tandem:aggregator:leader"
LEADER_TTL_MS = 6000


class Aggregator(Aggregation):
    """The core (`aggregation.Aggregation`) in its loop: one leader per fleet reads the
    stream, sends each tick's messages, writes the snapshot and the rollups."""

    def __init__(self, *, tick_s: float = 0.5, clock=time.time, registry: Registry | None = None):
        super().__init__(tick_s=tick_s, clock=clock, registry=registry)
        self.leader_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"

    # --- the loop -------------------------------------------------------------------------------
    async def run(self, *, redis_url: str, stop: asyncio.Event, layer=None) -> None:
        """Until `stop`: lead (or stand by), serve; survive Redis restarts."""
        import redis.asyncio as aioredis
        from channels.layers import get_channel_layer

        layer = layer or get_channel_layer()
        r = aioredis.from_url(redis_url)
        background: set[asyncio.Task] = set()
        try:
            while not stop.is_set():
                try:
                    if not await self._lead(r, stop):
                        break
                    await self._serve(r, layer, stop, background)
                except (ConnectionError, OSError, aioredis.RedisError) as exc:
                    log.warning("aggregator: redis error %s; retrying in 1s", exc)
                    await asyncio.sleep(1.0)
        finally:
            if background:
                await asyncio.gather(*background, return_exceptions=True)
            try:
                if await r.get(LEADER_KEY) == self.leader_id.encode():
                    await r.delete(LEADER_KEY)
            except (ConnectionError, OSError, aioredis.RedisError):
                pass
            await r.aclose()

    async def _serve(self, r, layer, stop: asyncio.Event, background: set) -> None:
        """The loop of the leader; returns on `stop` or when another aggregator leads."""
        import redis.asyncio as aioredis

        await self._refresh_registry()
        last_id = await _stream_tail(r)
        await r.hset(LIVE_KEY, "meta", json.dumps({"ts": self.clock(), "started": self.started}))
        log.info("aggregator: reading %s after %s, tick %.2fs", STREAM, last_id, self.tick_s)
        next_tick = self.clock() + self.tick_s
        next_registry = self.clock() + 5.0
        next_prune = self.clock() + 30.0
        refreshing: asyncio.Future | None = None
        while not stop.is_set():
            try:
                block_ms = max(1, int((next_tick - self.clock()) * 1000))
                response = await r.xread({STREAM: last_id}, count=2000, block=block_ms)
                for _stream, entries in response or []:
                    arrival = self.clock()
                    for entry_id, fields in entries:
                        last_id = entry_id
                        self.ingest_entry(fields, now=arrival)
                now = self.clock()
                if now < next_tick:
                    continue
                next_tick += self.tick_s
                if next_tick < now:
                    next_tick = now + self.tick_s
                if refreshing is not None and refreshing.done():
                    self._apply_registry(refreshing)
                    refreshing = None
                due = now >= next_registry or (self.has_unknown and now >= next_registry - 3.0)
                if due and refreshing is None:  # in a thread: a slow DB never stalls a tick
                    next_registry = now + 5.0
                    refreshing = asyncio.ensure_future(sync_to_async(_load_registry_fresh)())
                if not await r.eval(
                    REFRESH_LEADER_LOCK, 1, LEADER_KEY, self.leader_id, LEADER_TTL_MS
                ):
                    log.warning("aggregator: another aggregator leads now; standing by")
                    return
                await self._tick(r, layer, now)
                rows = self.close_buckets(now)
                if rows:
                    _spawn(background, sync_to_async(write_rollups)(rows))
                if now >= next_prune:
                    next_prune = now + 60.0
                    _spawn(background, sync_to_async(prune_rollups)())
                    await r.zremrangebyscore(INTEREST_KEY, "-inf", now)
            except (ConnectionError, OSError, aioredis.RedisError) as exc:
                log.warning("aggregator: redis error %s; retrying in 1s", exc)
                await asyncio.sleep(1.0)

    async def _lead(self, r, stop: asyncio.Event) -> bool:
        """One aggregator per fleet: take the leader lock, or wait as a standby until the
        current one stops refreshing it (it refreshes every tick; it expires after
        LEADER_TTL_MS). False if asked to stop while waiting."""
        said = False
        while not stop.is_set():
            if await r.set(LEADER_KEY, self.leader_id, nx=True, px=LEADER_TTL_MS):
                return True
            if not said:
                log.info("aggregator: another aggregator leads; standing by")
                said = True
            try:
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            except TimeoutError:
                pass
        return False

    def _apply_registry(self, done: asyncio.Future) -> None:
        try:
            self.set_registry(done.result())
        except Exception:  # database away for a moment: keep serving what we know
            log.exception("aggregator: registry refresh failed; keeping the previous one")

    async def _refresh_registry(self) -> None:
        try:
            registry = await sync_to_async(_load_registry_fresh)()
        except Exception:  # database away for a moment: keep serving what we know
            log.exception("aggregator: registry refresh failed; keeping the previous one")
            return
        self.set_registry(registry)

    async def _tick(self, r, layer, now: float) -> None:
        started = time.perf_counter()
        try:
            await self._tick_work(r, layer, now)
        finally:
            self.tick_work_s = time.perf_counter() - started
            self.tick_work_max_s = max(self.tick_work_max_s, self.tick_work_s)

    async def _tick_work(self, r, layer, now: float) -> None:
        built = self.build(now)
        interested = {
            g.decode() if isinstance(g, bytes) else g
            for g in await r.zrangebyscore(INTEREST_KEY, now, "+inf")
        }
        sends = [
            feed.publish(self, r, layer, built, now),  # the fleet page's deltas
            payloads.send(layer, payloads.GROUP_WALL, built["wall"]),
        ]
        for pid, msg in built["pipelines"].items():
            if payloads.pipeline_group(pid) in interested:
                sends.append(payloads.send(layer, payloads.pipeline_group(pid), msg))
        for nid in built["node_rows"]:
            if payloads.node_group(nid) in interested:
                msg = self.node_message(nid, built["node_rows"], now)
                sends.append(payloads.send(layer, payloads.node_group(nid), msg))
        results = await asyncio.gather(*sends, return_exceptions=True)
        self.messages_sent += sum(1 for res in results if not isinstance(res, Exception))
        snapshot = built["snapshot"]
        pipe = r.pipeline(transaction=False)
        pipe.hset(LIVE_KEY, mapping=snapshot)
        gone = self._written_fields - built["fields"]
        if gone:
            pipe.hdel(LIVE_KEY, *gone)
        self._written_fields = built["fields"]
        await pipe.execute()


def _spawn(tasks: set, coro) -> None:
    task = asyncio.ensure_future(coro)
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    task.add_done_callback(_log_failure)


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("aggregator background job failed", exc_info=task.exception())


async def _stream_tail(r) -> bytes | str:
    """Start after the newest entry already on the stream (no replay of a stale backlog)."""
    last = await r.xrevrange(STREAM, count=1)
    return last[0][0] if last else "0-0"


def _load_registry_fresh() -> Registry:
    from django.db import close_old_connections

    close_old_connections()
    return load_registry()


def write_rollups(rows: list[dict]) -> int:
    from django.db import close_old_connections

    from fleet.telemetry.rollups import write

    close_old_connections()
    return write(rows)


def prune_rollups() -> int:
    from django.db import close_old_connections

    from fleet.telemetry.rollups import prune

    close_old_connections()
    return prune()
