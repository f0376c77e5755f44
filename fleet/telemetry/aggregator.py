"""The telemetry aggregator (`manage.py run_aggregator`; TANDEM_AGGREGATORS processes).

Each process owns some shards of the telemetry streams (`fleet.telemetry.shards`: leases in
Redis, rebalanced every tick, a dead process's shards taken within 5 s). It reads its shards
through a consumer group in batches, keeps the live state of their nodes (a sliding window of
samples), writes their node rollups and snapshot fields, sends their node-<id> messages, and
every `tick_s` (0.5 s, ticks aligned on the clock) reports a partial to the merge.

One process, the leader (`LEADER_KEY`, refreshed every tick), also merges: it applies every
partial (its own in-process, the others' off `partials.PARTIALS`), and `publish()` sends ONE
message per websocket group (fleet, wall, and the pipeline-<id> groups somebody subscribed
to) and writes the fleet/pipeline snapshot fields; it also writes the pipeline and fleet
rollups from the shards' bucket sums. One process alone owns every shard and leads.

A node's state change (drain, lost, retire, move) reaches the fleet view on the next tick:
the services post a notice after commit (`fleet.telemetry.notices`), every aggregator reloads
those nodes, without waiting for the full registry refresh (REGISTRY_REFRESH_S).

The core (`ingest_entry`, `partial`, `close_shard_buckets`; `merge.Merge`) is synchronous and
clock-injected, in `aggregation.py` and `merge.py`, so tests drive it directly; writing the
rollups it closes is `rollup_writer.py`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import os
import time
import uuid

from asgiref.sync import sync_to_async

from fleet.logs import Throttled
from fleet.redis_clients import REFRESH_LEADER_LOCK
from fleet.telemetry import feed, notices, partials, payloads, shards
from fleet.telemetry.aggregation import Aggregation
from fleet.telemetry.ingest import SHARDS, STREAMS
from fleet.telemetry.registry import Registry, load_nodes, load_registry
from fleet.telemetry.rollup_writer import RollupWriter, entry_time, prune_rollups, spawn
from fleet.telemetry.snapshot import INTEREST_KEY, LIVE_KEY

log = logging.getLogger(__name__)

LEADER_KEY = "tandem:aggregator:leader"
LEADER_TTL_MS = 6000
REGISTRY_REFRESH_S = 30.0  # the full reload; state changes come as notices in between
READ_BATCH = 4000  # entries per read over all owned shards: a tick is never late by much


class Aggregator(Aggregation, RollupWriter):
    """The core in its loop: owns shards, reports partials; the leader merges and sends."""

    def __init__(self, *, tick_s: float = 0.5, clock=time.time, registry: Registry | None = None):
        self._retired: set[int] = set()  # left the registry since the last tick: fields go
        super().__init__(tick_s=tick_s, clock=clock, registry=registry)
        self.leader_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.agg_id = self.leader_id
        self.leading = True  # in-process use (tests): a lone aggregator leads
        self.unacked: dict[int, list] = {}  # shard -> entry ids read since the last close
        self._caught_up = True
        self._partials_id: bytes | str = "$"
        self._notices_id: bytes | str = "$"
        self._scopes_done: set[tuple[int, float]] = set()
        self._written_fields: set[str] = set()
        self.requeued: set[int] = set()  # noticed changes waiting for the running reload
        self.fleet_feed: object | None = None  # feed.publish's FeedBuilder while leading

    # --- the loop -------------------------------------------------------------------------------
    async def run(self, *, redis_url: str, stop: asyncio.Event, layer=None) -> None:
        """Until `stop`: own shards, lead when nobody else does; survive Redis restarts."""
        import redis.asyncio as aioredis
        from channels.layers import get_channel_layer

        layer, quiet = layer or get_channel_layer(), Throttled(log, every_s=30.0)
        r = aioredis.from_url(redis_url)
        background: set[asyncio.Task] = set()
        self.owned = frozenset()
        self.leading = False
        try:
            await self._refresh_registry()
            gc.collect()
            gc.freeze()  # the registry and startup objects: never scanned again
            while not stop.is_set():
                try:
                    await self._serve(r, layer, stop, background)
                except (ConnectionError, OSError, aioredis.RedisError) as exc:
                    quiet.warning("aggregator: redis error %s; retrying every 1s", exc)
                    self.set_owned(frozenset())
                    await asyncio.sleep(1.0)
        finally:
            if background:
                await asyncio.gather(*background, return_exceptions=True)
            try:
                await shards.release(r, self.agg_id, SHARDS)
                if await r.get(LEADER_KEY) == self.leader_id.encode():
                    await r.delete(LEADER_KEY)
            except (ConnectionError, OSError, aioredis.RedisError):
                pass
            await r.aclose()

    async def _serve(self, r, layer, stop: asyncio.Event, background: set) -> None:
        await r.hset(LIVE_KEY, "meta", self.meta(self.clock(), {"samples": 0, "dropped": {}}))
        self._notices_id = await _tail(r, notices.STREAM)
        log.info("aggregator %s: tick %.2fs, %d shards", self.agg_id, self.tick_s, SHARDS)
        next_tick = math.ceil(self.clock() / self.tick_s) * self.tick_s
        next_registry = self.clock() + REGISTRY_REFRESH_S
        next_prune = self.clock() + 30.0
        refreshing: asyncio.Future | None = None
        patching: asyncio.Future | None = None
        await self._rebalance(r)
        while not stop.is_set():
            block_ms = max(1, int((next_tick - self.clock()) * 1000))
            if self.owned:
                streams = {STREAMS[s]: ">" for s in sorted(self.owned)}
                count = max(50, READ_BATCH // len(streams))
                try:
                    response = await r.xreadgroup(
                        shards.GROUP, self.agg_id, streams, count=count, block=block_ms
                    )
                except Exception as exc:  # the group went away (stream deleted): make it again
                    if "NOGROUP" not in str(exc):
                        raise
                    await _ensure_groups(r, self.owned)
                    continue
                full = False
                for stream, entries in response or []:
                    shard = STREAMS.index(stream.decode() if isinstance(stream, bytes) else stream)
                    ids = self.unacked.setdefault(shard, [])
                    full = full or len(entries) >= count
                    for entry_id, fields in entries:
                        ids.append(entry_id)
                        if fields:
                            self.ingest_entry(fields, now=entry_time(entry_id))
                self._caught_up = not full
            else:
                await asyncio.sleep(block_ms / 1000)
            now = self.clock()
            if now < next_tick:
                continue
            next_tick = max(next_tick + self.tick_s, math.ceil(now / self.tick_s) * self.tick_s)
            if refreshing is not None and refreshing.done():
                self._apply(refreshing, self.set_registry)
                refreshing = None
            if patching is not None and patching.done():
                self._apply(patching, lambda got: self.patch_registry(*got))
                patching = None
            due = now >= next_registry or (self.has_unknown and now >= next_registry - 27.0)
            if due and refreshing is None:  # in a thread: a slow DB never stalls a tick
                next_registry = now + REGISTRY_REFRESH_S
                refreshing = asyncio.ensure_future(sync_to_async(_fresh(load_registry))())
            changed = await notices.read(r, self)
            if changed and patching is None:
                patching = asyncio.ensure_future(sync_to_async(_fresh(load_nodes))(changed))
            elif changed:
                self.requeued |= changed
            await self._rebalance(r)
            leading = bool(
                await r.eval(REFRESH_LEADER_LOCK, 1, LEADER_KEY, self.leader_id, LEADER_TTL_MS)
            )
            if not leading:
                self.fleet_feed = None  # leading again later: a new epoch, clients resync
            self.leading = leading
            await self._tick(r, layer, now)
            await self._close_due(r, now, background)
            if now >= next_prune:
                next_prune = now + 60.0
                if self.leading:
                    spawn(background, sync_to_async(prune_rollups)())
                    await r.zremrangebyscore(INTEREST_KEY, "-inf", now)

    def _apply(self, done: asyncio.Future, apply) -> None:
        try:
            apply(done.result())
        except Exception:  # database away for a moment: keep serving what we know
            log.exception("aggregator: registry refresh failed; keeping the previous one")

    async def _refresh_registry(self) -> None:
        try:
            registry = await sync_to_async(_fresh(load_registry))()
        except Exception:  # database away for a moment: keep serving what we know
            log.exception("aggregator: registry refresh failed; keeping the previous one")
            return
        self.set_registry(registry)

    async def _rebalance(self, r) -> None:
        owned = await shards.balance(r, self.agg_id, int(self.clock() * 1000), SHARDS)
        if owned == self.owned:
            return
        for shard in set(self.owned or ()) - owned:
            self.unacked.pop(shard, None)
        taken = self.set_owned(owned)
        if taken:
            log.info("aggregator %s: takes shards %s", self.agg_id, sorted(taken))
            await _ensure_groups(r, taken)
            for shard in sorted(taken):
                await self._claim(r, shard)

    async def _claim(self, r, shard: int) -> None:
        """Replay every pending entry of a shard just taken (its previous owner's unacked
        work): windows and open rollup buckets are rebuilt from them."""
        start: bytes | str = "0-0"
        ids = self.unacked.setdefault(shard, [])
        while True:
            got = await r.xautoclaim(
                STREAMS[shard], shards.GROUP, self.agg_id, 0, start_id=start, count=READ_BATCH
            )
            start, entries = got[0], got[1]
            for entry_id, fields in entries:
                ids.append(entry_id)
                if fields:
                    self.ingest_entry(fields, now=entry_time(entry_id))
            if not entries or start in (b"0-0", "0-0"):
                return

    # --- one tick -------------------------------------------------------------------------------
    async def _tick(self, r, layer, now: float) -> None:
        started = time.perf_counter()
        try:
            await self._tick_work(r, layer, now)
        finally:
            self.tick_work_s = time.perf_counter() - started
            self.tick_work_max_s = max(self.tick_work_max_s, self.tick_work_s)

    async def _tick_work(self, r, layer, now: float) -> None:
        partial = self.partial(now)
        interested = {
            g.decode() if isinstance(g, bytes) else g
            for g in await r.zrangebyscore(INTEREST_KEY, now, "+inf")
        }
        pipe = r.pipeline(transaction=False)
        if self.leading:
            self.merge.apply(partial)
            for raw in await self._read_partials(r):
                self.merge.apply(raw)
        else:
            pipe.xadd(
                partials.PARTIALS,
                {"p": partials.encode_partial(partial)},
                maxlen=partials.PARTIALS_MAXLEN,
                approximate=True,
            )
            self._partials_id = "$"  # a future leader starts from fresh partials
        sends = []
        for group in interested:
            if group.startswith("node-"):
                nid = int(group[5:])
                if nid in self.registry.nodes and self.owns(nid):
                    msg = self.node_message(nid, None, now)
                    sends.append(payloads.send(layer, group, msg))
        node_fields = self.node_snapshot(now)
        if node_fields:
            pipe.hset(LIVE_KEY, mapping=node_fields)
        if self.leading:
            built = self.merge.build(now, self.registry)
            sends += publish(self, r, layer, built, interested, now)
            snapshot = built["snapshot"]
            snapshot["meta"] = self.meta(now, built["counters"])
            pipe.hset(LIVE_KEY, mapping=snapshot)
            fields = {"fleet", "meta", *(f"p:{p}" for p in self.registry.pipelines)}
            gone = self._written_fields - fields
            if gone:
                pipe.hdel(LIVE_KEY, *gone)
            self._written_fields = fields
            retired = [f"n:{nid}" for nid in self._retired]
            if retired:
                pipe.hdel(LIVE_KEY, *retired)
                self._retired.clear()
        results = await asyncio.gather(*sends, return_exceptions=True)
        self.messages_sent += sum(1 for res in results if not isinstance(res, Exception))
        await pipe.execute()

    def set_registry(self, registry: Registry) -> None:
        self._retired.update(set(self.registry.nodes) - set(registry.nodes))
        super().set_registry(registry)

    def patch_registry(self, update: Registry, gone: set[int]) -> None:
        self._retired.update(gone)
        super().patch_registry(update, gone)

    async def _read_partials(self, r) -> list[dict]:
        if self._partials_id == "$":  # just became leader: the last few seconds' partials
            self._partials_id = f"{int((self.clock() - 6.0) * 1000)}-0"
        got = await r.xread({partials.PARTIALS: self._partials_id}, count=10_000)
        out = []
        for _stream, entries in got or []:
            for entry_id, fields in entries:
                self._partials_id = entry_id
                try:
                    partial = partials.decode_partial(fields[b"p"])
                except (KeyError, ValueError, TypeError):
                    continue
                if partial.get("agg") != self.agg_id:
                    out.append(partial)
        return out


def publish(owner, r, layer, built: dict, interested: set[str], now: float) -> list:
    """THE publishing point of a merged tick (the leader's): one message per websocket group
    (the fleet page's deltas, `feed.publish`; the wall; the subscribed pipeline-<id>
    groups). `owner` keeps the feed's state. Returns the sends to await."""
    sends = [
        feed.publish(owner, r, layer, built, now),  # the fleet page's deltas
        payloads.send(layer, payloads.GROUP_WALL, built["wall"]),
    ]
    for pid, msg in built["pipelines"].items():
        if payloads.pipeline_group(pid) in interested:
            sends.append(payloads.send(layer, payloads.pipeline_group(pid), msg))
    return sends


async def _ensure_groups(r, owned) -> None:
    """The consumer group of each shard, made where missing. It starts at the stream's first
    entry ("0"), not its end: samples published before any aggregator ever read the shard (a
    fresh deployment, a stream re-made after a delete) are read, not silently skipped. The
    stream holds at most STREAM_MAXLEN entries, so that first read is bounded."""
    for shard in owned:
        try:
            await r.xgroup_create(STREAMS[shard], shards.GROUP, id="0", mkstream=True)
        except Exception as exc:  # BUSYGROUP: it exists
            if "BUSYGROUP" not in str(exc):
                raise


async def _tail(r, stream: str) -> bytes | str:
    last = await r.xrevrange(stream, count=1)
    return last[0][0] if last else "0-0"


def _fresh(load):
    def call(*args):
        from django.db import close_old_connections

        close_old_connections()
        return load(*args)

    return call
