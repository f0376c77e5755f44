"""The aggregator's rollup writing: closing due buckets in the loop, node rows to the
database and the shards' sums to Redis, then acknowledging (and trimming) the stream entries
they cover; the leader's pipeline and fleet rows once every shard's sums are in.

`RollupWriter` is the part of `aggregator.Aggregator` that writes rollups (the arithmetic is
`rollup_buckets.RollupBuckets`, in the synchronous core).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import TYPE_CHECKING

from asgiref.sync import sync_to_async

from fleet.telemetry import partials, shards
from fleet.telemetry.ingest import SHARDS, STREAMS
from fleet.telemetry.merge import ROLLUP_S, Merge
from fleet.telemetry.rollup_buckets import ROLLUP_LONG_S, covered_span, scope_rollups

log = logging.getLogger("fleet.telemetry.aggregator")

CLOSE_GRACE_S = 1.0  # a bucket closes this long after its end once the reader caught up
CLOSE_LATEST_S = 5.0  # ... and at the latest this long after it, caught up or not
SCOPE_GRACE_S = 8.0  # the leader waits this long for every shard's sums of a bucket
# Acknowledged entries kept this long before the trim (for inspection; Redis holds about
# (10 s open bucket + this) x the sample rate x ~0.7 KB: ~200 MB at 10,000 nodes)
TRIM_KEEP_MS = 20_000


def entry_time(entry_id) -> float:
    """A stream entry's time (s), from its id."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.split("-", 1)[0]) / 1000.0


class RollupWriter:
    """Writing rollups, for `aggregator.Aggregator` (which sets these attributes and provides
    `close_shard_buckets`)."""

    bucket_start: float
    late: dict
    leading: bool
    owned: frozenset[int] | None
    merge: Merge
    unacked: dict[int, list]  # shard -> entry ids read since the last close
    _caught_up: bool
    _scopes_done: set[tuple[int, float]]

    if TYPE_CHECKING:  # rollup_buckets.RollupBuckets', through aggregation.Aggregation

        def close_shard_buckets(self, now: float) -> tuple[list[dict], list[tuple]]: ...

    # --- rollups --------------------------------------------------------------------------------
    async def _close_due(self, r, now: float, background: set) -> None:
        """Close due buckets: node rows to the database, the shards' sums to Redis for the
        leader; then acknowledge (and trim) what those rollups cover."""
        end = self.bucket_start + ROLLUP_S
        if not self.late and not (
            now >= end + CLOSE_LATEST_S or (now >= end + CLOSE_GRACE_S and self._caught_up)
        ):
            if self.leading:
                await self._write_scopes(r, now, background)
            return
        boundary_ms = int(self.bucket_start + ROLLUP_S) * 1000 if now >= end else None
        rows, sums = self.close_shard_buckets(now)
        pipe = r.pipeline(transaction=False)
        for resolution, start, field, span, groups in sums:
            key = partials.rollup_key(resolution, start)
            pipe.hset(key, field, partials.encode_rollup(span, groups))
            pipe.expire(key, partials.ROLLUP_TTL_S)
        await pipe.execute()
        acks = self._acks(boundary_ms) if boundary_ms is not None else {}
        spawn(background, self._write_then_ack(r, rows, acks, boundary_ms))
        if self.leading:
            await self._write_scopes(r, now, background)

    def _acks(self, boundary_ms: int) -> dict[int, list]:
        """The entries the closed buckets cover, per shard (taken off `unacked`)."""
        out = {}
        for shard, ids in self.unacked.items():
            keep = [i for i in ids if entry_time(i) * 1000 >= boundary_ms]
            if len(keep) < len(ids):
                out[shard] = [i for i in ids if entry_time(i) * 1000 < boundary_ms]
            self.unacked[shard] = keep
        return out

    async def _write_then_ack(self, r, rows: list, acks: dict, boundary_ms: int | None):
        """In the background (a slow database never stalls a tick): the node rollups, THEN
        the acknowledgement of the entries they cover (a failed write leaves them pending,
        to be replayed by whoever takes the shard next) and the trim."""
        if rows:
            await sync_to_async(write_rollups)(rows)
        if boundary_ms is None:
            return
        pipe = r.pipeline(transaction=False)
        for shard, ids in acks.items():
            if shard in (self.owned or ()):
                pipe.xack(STREAMS[shard], shards.GROUP, *ids)
        for shard in self.owned or ():
            pipe.xtrim(STREAMS[shard], minid=f"{boundary_ms - TRIM_KEEP_MS}-0", approximate=True)
        await pipe.execute()

    async def _write_scopes(self, r, now: float, background: set) -> None:
        """The leader: pipeline and fleet rollups of every bucket whose shard sums are all in
        (or SCOPE_GRACE_S after its end)."""
        rows: list[dict] = []
        for resolution, expected in ((ROLLUP_S, SHARDS), (ROLLUP_LONG_S, None)):
            last = math.floor(now / resolution) * resolution - resolution
            for start in [last - i * resolution for i in range(6 if expected else 2)]:
                if (resolution, start) in self._scopes_done or now < start + resolution:
                    continue
                key = partials.rollup_key(resolution, start)
                got = await r.hgetall(key)
                complete = expected is not None and len(got) >= expected
                if not (complete or now >= start + resolution + SCOPE_GRACE_S):
                    continue
                self._scopes_done.add((resolution, start))
                if not got:
                    continue
                decoded = {field: partials.decode_rollup(raw) for field, raw in got.items()}
                span = covered_span({field: span for field, (span, _) in decoded.items()})
                rows += scope_rollups(resolution, start, span, [g for _, g in decoded.values()])
                await r.delete(key)
        if len(self._scopes_done) > 100:
            self._scopes_done = {k for k in self._scopes_done if k[1] > now - 900}
        if rows:
            self.merge.observe_rollups(rows)  # the last measured acceptance the pages show
            spawn(background, sync_to_async(write_rollups)(rows))


def spawn(tasks: set, coro) -> None:
    task = asyncio.ensure_future(coro)
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    task.add_done_callback(log_failure)


def log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("aggregator background job failed", exc_info=task.exception())


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
