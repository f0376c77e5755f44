"""The aggregator's rollup buckets: the 10 s and 5 min buckets a node's samples fall into,
closing them into node rows and per-shard sums, and the pipeline and fleet rows the leader
(or one process owning every shard) builds from those sums.

`RollupBuckets` is the part of `aggregation.Aggregation` that closes buckets; it works on the
state the aggregation keeps (nodes, the open bucket starts, samples set aside as late or
ahead). Pure and synchronous like the rest of the core (tests/test_walls.py guards it).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from fleet.telemetry.accumulators import Acc, derive
from fleet.telemetry.ingest import SHARDS
from fleet.telemetry.merge import (
    FLEET_ALL,
    FLEET_REAL,
    FLEET_SIMULATED,
    ROLLUP_S,
    Merge,
    measured,
    newer,
)
from fleet.telemetry.node_live import NodeLive
from fleet.telemetry.registry import Registry

ROLLUP_LONG_S = 300


def bucket_time(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def bucket_of(ts: float) -> float:
    return math.floor(ts / ROLLUP_S) * ROLLUP_S


def long_bucket_of(ts: float) -> float:
    return math.floor(ts / ROLLUP_LONG_S) * ROLLUP_LONG_S


class RollupBuckets:
    """Closing buckets, for `aggregation.Aggregation` (which sets these attributes)."""

    nodes: dict[int, NodeLive]
    registry: Registry
    merge: Merge
    owned: frozenset[int] | None
    observed_from: float
    bucket_start: float
    long_start: float
    late: dict[float, dict[int, Acc]]  # closed buckets' samples that arrived late
    ahead: dict[float, dict[int, Acc]]  # samples of a bucket after the open one
    _long_acc: dict[float, list]  # close_buckets' in-process 5 min sums

    def close_shard_buckets(self, now: float) -> tuple[list[dict], list[tuple]]:
        """Close every bucket that ended before `now`: (node rollup rows, shard sums), the sums
        as (resolution, start, field, span, {pipeline id | None: Acc}) for the leader, one per
        owned shard and bucket (5 min sums per 10 s bucket, so a rebuilt one replaces itself)."""
        rows: list[dict] = []
        sums: list[tuple] = []
        for start in sorted(self.late):
            late = self.late.pop(start)
            if start >= self.bucket_start:  # not closed yet after all: fold it in
                for nid, acc in late.items():
                    if nid in self.nodes:
                        self.nodes[nid].bucket.add(acc)
                continue
            rows += self._close(ROLLUP_S, start, late, sums)
            same_long = long_bucket_of(start) == self.long_start
            for nid, acc in late.items():  # counted as the open bucket is when it closes
                state = self.nodes.get(nid)
                if state is not None:
                    state.total.add(acc)
                    if same_long:
                        state.long.add(acc)
        if now < self.bucket_start + ROLLUP_S:
            return rows, sums
        buckets = {nid: state.bucket for nid, state in self.nodes.items() if not state.bucket.empty}
        rows += self._close(ROLLUP_S, self.bucket_start, buckets, sums)
        for state in self.nodes.values():
            state.long.add(state.bucket)
            state.total.add(state.bucket)
            state.bucket = Acc()
        self.bucket_start = bucket_of(now)
        for start in [s for s in self.ahead if s <= self.bucket_start]:
            accs = self.ahead.pop(start)
            if start < self.bucket_start:  # skipped over (a stall): closes as a late bucket
                self.late[start] = accs
                continue
            for nid, acc in accs.items():
                if nid in self.nodes:
                    self.nodes[nid].bucket.add(acc)
        if now >= self.long_start + ROLLUP_LONG_S:
            longs = {nid: state.long for nid, state in self.nodes.items() if not state.long.empty}
            span = self._span(ROLLUP_LONG_S, self.long_start)
            when = bucket_time(self.long_start)
            if span > 0:
                rows += [
                    rollup_row("node", nid, ROLLUP_LONG_S, when, rollup_data(acc, span))
                    for nid, acc in longs.items()
                ]
            for state in self.nodes.values():
                state.long = Acc()
            self.long_start = long_bucket_of(now)
        return rows, sums

    def _span(self, resolution: int, start: float) -> float:
        return start + resolution - max(start, self.observed_from)

    def _close(self, resolution: int, start: float, accs: dict, sums: list) -> list[dict]:
        span = self._span(resolution, start)
        if span <= 0:
            return []
        when = bucket_time(start)
        rows = []
        by_shard: dict[int, dict] = {s: {} for s in (self.owned or range(SHARDS))}
        reg = self.registry
        for nid, acc in accs.items():
            data = rollup_data(acc, span)
            rows.append(rollup_row("node", nid, resolution, when, data))
            info = reg.nodes.get(nid)
            pid = info.pipeline_id if info else None
            state = self.nodes.get(nid)
            if state is not None and resolution == ROLLUP_S:  # its last measured acceptance
                state.last_measured = newer(state.last_measured, measured(data, start + resolution))
            last = state.last if state is not None else None
            sim = bool((info and info.simulated) or (last or {}).get("simulated"))
            sums_of = by_shard.setdefault(nid % SHARDS, {})
            if (pid, sim) not in sums_of:
                sums_of[(pid, sim)] = Acc()
            sums_of[(pid, sim)].add(acc)
        long_start = long_bucket_of(start)
        for shard, groups in by_shard.items():
            sums.append((resolution, start, str(shard), span, groups))
            sums.append((ROLLUP_LONG_S, long_start, f"{shard}:{int(start)}", span, groups))
        return rows

    def close_buckets(self, now: float) -> list[dict]:
        """Rollup rows for every bucket that ended before `now` (dicts of Rollup fields), the
        pipeline and fleet ones summed in-process (this process owning every shard)."""
        rows, sums = self.close_shard_buckets(now)
        ten = [(start, span, groups) for res, start, _, span, groups in sums if res == ROLLUP_S]
        for start, span, groups in by_start(ten):
            rows += scope_rollups(ROLLUP_S, start, span, groups)
            self._long_acc.setdefault(long_bucket_of(start), []).extend(groups)
        for long_start in [s for s in self._long_acc if s + ROLLUP_LONG_S <= now]:
            merged: dict = {}
            for groups in self._long_acc.pop(long_start):
                add_groups(merged, groups)
            span = self._span(ROLLUP_LONG_S, long_start)
            if span > 0:
                rows += scope_rollups(ROLLUP_LONG_S, long_start, span, [merged])
        self.merge.observe_rollups(rows)
        return rows


def covered_span(spans: dict[bytes | str, float]) -> float:
    """The seconds a scope rollup bucket covers, from its shard fields' spans (Redis hash
    fields, `_close`): a 10 s bucket's fields ("<shard>") cover the same seconds, the longest
    counts (an owner that started mid-bucket saw less); a 5-minute bucket's fields
    ("<shard>:<10 s start>") are per 10 s bucket, whose spans add up. (Taking the longest of
    those divided five minutes of energy by ten seconds: a 30x overstated power.)"""
    per_bucket: dict[str, float] = {}
    for key, span in spans.items():
        name = key.decode() if isinstance(key, bytes) else key
        ten_s = name.partition(":")[2]
        per_bucket[ten_s] = max(per_bucket.get(ten_s, 0.0), span)
    return sum(per_bucket.values())


def by_start(items: list) -> list[tuple[float, float, list]]:
    out: dict[float, tuple[float, list]] = {}
    for start, span, groups in items:
        held = out.setdefault(start, (span, []))
        held[1].append(groups)
    return [(start, span, groups) for start, (span, groups) in sorted(out.items())]


def add_groups(into: dict, groups: dict) -> None:
    for pid, acc in groups.items():
        if pid not in into:
            into[pid] = Acc()
        into[pid].add(acc)


def scope_rollups(resolution: int, start: float, span: float, shard_groups: list) -> list[dict]:
    """Pipeline and fleet rollup rows of one bucket from the shards' {(pipeline, simulated):
    Acc} sums: one row per pipeline; the fleet's for all nodes, the real and the simulated."""
    merged: dict = {}
    for groups in shard_groups:
        add_groups(merged, groups)
    when = bucket_time(start)
    rows = []
    pipes: dict[int, Acc] = {}
    by_class = {False: Acc(), True: Acc()}  # real and simulated nodes apart
    for (pid, sim), acc in merged.items():
        if acc.empty:
            continue
        by_class[bool(sim)].add(acc)
        if pid is not None:
            if pid not in pipes:
                pipes[pid] = Acc()
            pipes[pid].add(acc)
    for pid, acc in pipes.items():
        rows.append(rollup_row("pipeline", pid, resolution, when, rollup_data(acc, span)))
    fleet = by_class[False].copy()
    fleet.add(by_class[True])
    if not fleet.empty:
        rows.append(rollup_row("fleet", FLEET_ALL, resolution, when, rollup_data(fleet, span)))
    for simulated, acc in by_class.items():
        if not acc.empty:
            scope_id = FLEET_SIMULATED if simulated else FLEET_REAL
            rows.append(rollup_row("fleet", scope_id, resolution, when, rollup_data(acc, span)))
    return rows


def rollup_data(acc: Acc, span: float) -> dict:
    """A rollup row's figures: derive()'s, and the draft rounds they rest on (`drafts`: how
    much a bucket's acceptance says, `merge.measured`)."""
    return {**derive(acc, span), "drafts": round(acc.drafts, 1)}


def rollup_row(scope: str, scope_id: int, resolution: int, start: datetime, data: dict) -> dict:
    return {
        "scope": scope,
        "scope_id": scope_id,
        "resolution_s": resolution,
        "start": start,
        "data": data,
    }
