"""The aggregator's synchronous core: parsing and admitting signed samples, the sliding live
windows per node, the per-shard partial a tick reports to the merge, the node snapshot fields,
and the 10 s / 5 min rollup figures.

One aggregator process owns some shards of the fleet (`owned`; None: all of them) and keeps
the state of their nodes only. `partial()` is what it reports each tick; `merge.Merge` turns
the partials of every shard into pipeline and fleet figures. `build()` does both in-process:
one process serving a whole (small) fleet, and the tests.

No event loop, Redis, channel layer or database here (tests/test_walls.py guards it): the
runner, `aggregator.Aggregator`, reads the streams, sends, and writes what this builds.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

from fleet.telemetry import admission, canonical, payloads
from fleet.telemetry.accumulators import Acc, derive
from fleet.telemetry.ingest import SHARDS, Verifier, unpack
from fleet.telemetry.merge import (
    FLEET_ALL,
    FLEET_REAL,
    FLEET_SIMULATED,
    ROLLUP_S,
    Merge,
    aged,
    compose_row,
    measured,
    newer,
)
from fleet.telemetry.registry import Registry
from fleet.telemetry.samples import InvalidSample

log = logging.getLogger("fleet.telemetry.aggregator")  # one logger for the whole aggregator

LIVE_WINDOW_S = 5.0
STALE_AFTER_S = 10.0
ROLLUP_LONG_S = 300
PENDING_MAX = 20_000
SNAPSHOT_FULL_S = 10.0  # every node's snapshot field is rewritten at least this often
SNAPSHOT_SLICE_MAX = 150  # ... unless that is more than this many a tick (then less often)
SNAPSHOT_MIN_S = 10.0  # and a changed one at most this often (the node page has its socket)
FULL_ROWS_S = 5.0  # every node's figure row goes to the merge at least this often


@dataclass
class NodeLive:
    window: deque = field(default_factory=deque)  # (arrival, expires, sample)
    live: Acc = field(default_factory=Acc)
    total: Acc = field(default_factory=Acc)  # closed buckets since the start (+ bucket)
    bucket: Acc = field(default_factory=Acc)  # current 10 s rollup bucket
    long: Acc = field(default_factory=Acc)  # current 5 min rollup bucket
    last: dict | None = None
    last_arrival: float = 0.0
    dirty: bool = True  # the window changed since `fig` was computed
    fig: list | None = None  # the row figures (merge.POWER ...), None: no live samples
    stats: dict | None = None  # derive(live), computed when asked (`Aggregation.stats_of`)
    stats_fresh: bool = False
    last_measured: dict | None = None  # LastMeasured without age_s
    written_at: float = -math.inf  # its snapshot field
    snap_dirty: bool = True  # its figures or facts changed since that was written


def _now_iso(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def _bucket_of(ts: float) -> float:
    return math.floor(ts / ROLLUP_S) * ROLLUP_S


def _long_bucket_of(ts: float) -> float:
    return math.floor(ts / ROLLUP_LONG_S) * ROLLUP_LONG_S


class Aggregation:
    """The aggregator's state and arithmetic, without the loop: feed it stream entries
    (`ingest_entry`), ask it what a tick reports (`partial`, or `build` for everything) and
    which rollups are due (`close_buckets`). Clock-injected: every method takes `now`."""

    def __init__(self, *, tick_s: float = 0.5, clock=time.time, registry: Registry | None = None):
        self.tick_s = tick_s
        self.clock = clock
        self.registry = registry or Registry()
        self.owned: frozenset[int] | None = None  # shards; None: every shard
        self.nodes: dict[int, NodeLive] = {}
        self.pending: deque = deque(maxlen=PENDING_MAX)
        self.dropped: Counter = Counter()
        self.samples_ok = 0
        self.newest_ts: float | None = None
        self.started = clock()
        # Rollup spans count from here: lowered to the bucket of the oldest entry read, since a
        # replay (a predecessor's pending entries; samples published before the first
        # aggregator) covers its buckets whole, as no earlier owner closed them.
        self.observed_from = self.started
        self.bucket_start = _bucket_of(self.started)
        self.long_start = _long_bucket_of(self.started)
        # samples that arrived in an already closed bucket (re-read after a takeover):
        # bucket start -> node id -> Acc, closed on the next close_buckets
        self.late: dict[float, dict[int, Acc]] = {}
        self.ahead: dict[float, dict[int, Acc]] = {}  # arrived after the current bucket
        self.messages_sent = 0
        self.merge = Merge()
        self._snapshot_cursor = 0
        self._rows_cursor = 0
        self.tick_work_s = 0.0
        self.tick_work_max_s = 0.0
        self.agg_id = "local"
        self.verify = Verifier()
        self._long_acc: dict[float, list] = {}  # close_buckets' in-process 5 min sums

    @property
    def last_measured(self) -> dict:
        return self.merge.last_measured

    # --- ownership and registry -----------------------------------------------------------------
    def owns(self, node_id: int) -> bool:
        return self.owned is None or node_id % SHARDS in self.owned

    def set_owned(self, shards: frozenset[int] | None) -> set[int]:
        """Own these shards from now on; forget the nodes of shards given away (their new
        owner re-reads what it needs). The shards newly taken."""
        before = self.owned if self.owned is not None else frozenset(range(SHARDS))
        after = shards if shards is not None else frozenset(range(SHARDS))
        self.owned = shards
        for nid in [n for n in self.nodes if n % SHARDS not in after]:
            del self.nodes[nid]
        for aside in (self.late, self.ahead):
            for start in list(aside):
                aside[start] = {n: a for n, a in aside[start].items() if n % SHARDS in after}
        return set(after - before)

    def set_registry(self, registry: Registry) -> None:
        changed = {
            nid for nid, info in registry.nodes.items() if self.registry.nodes.get(nid) != info
        }
        self.registry = registry
        self._mark_changed(changed)
        for nid in list(self.nodes):
            if nid not in registry.nodes:  # retired or deleted
                del self.nodes[nid]
        self.merge.forget([nid for nid in self.merge.figs if nid not in registry.nodes])
        pending, self.pending = list(self.pending), deque(maxlen=PENDING_MAX)
        for fields, arrival in pending:
            self.ingest_entry(fields, now=arrival, retry=False)

    def patch_registry(self, update: Registry, gone: set[int]) -> None:
        """Apply a partial registry (the nodes of a state-change notice): `update`'s nodes and
        keys replace ours, `gone` nodes (retired, deleted) leave."""
        reg = self.registry
        nodes, keys = dict(reg.nodes), dict(reg.keys)
        changed = {nid for nid, info in update.nodes.items() if nodes.get(nid) != info}
        nodes.update(update.nodes)
        for nid in update.nodes:
            keys[nid] = update.keys.get(nid, [])
        for nid in gone:
            nodes.pop(nid, None)
            keys.pop(nid, None)
            self.nodes.pop(nid, None)
        self.merge.forget(gone)
        pipelines = update.pipelines or reg.pipelines
        self.registry = Registry(nodes=nodes, pipelines=pipelines, keys=keys)
        self._mark_changed(changed)

    def _mark_changed(self, node_ids) -> None:
        for nid in node_ids:
            state = self.nodes.get(nid)
            if state is not None:
                state.dirty = True
                state.snap_dirty = True
                state.written_at = -math.inf  # its snapshot field shows the new facts now

    # --- ingest -------------------------------------------------------------------------------
    def ingest_entry(self, fields: dict, *, now: float, retry: bool = True) -> bool:
        """One stream entry {node, body, sig}: verify, parse, add. False if dropped."""
        try:
            entry = unpack(fields)
            node_id, body, signature = int(entry["node"]), entry["body"], entry["sig"]
            if not isinstance(signature, bytes | str):
                raise TypeError("sig")
        except (TypeError, ValueError, KeyError, AttributeError):
            self.dropped["malformed"] += 1
            return False
        if node_id not in self.registry.nodes:
            if retry:
                self.pending.append((fields, now))  # registered a moment ago? next refresh
            else:
                self.dropped["unknown_node"] += 1
            return False
        if body is None or not self.verify(body, signature, self.registry.keys.get(node_id, ())):
            self.dropped["bad_signature"] += 1
            return False
        try:
            sample = canonical.load(body)
        except (ValueError, InvalidSample, RecursionError, TypeError):
            self.dropped["malformed"] += 1
            return False
        reason = self.unbelievable(node_id, sample, now=now)
        if reason is not None:
            self.dropped[reason] += 1
            return False
        self.add_sample(node_id, sample, now=now)
        return True

    def unbelievable(self, node_id: int, sample: dict, *, now: float) -> str | None:
        """Why a verified sample is not taken (replay, stale, future, impossible), or None."""
        state = self.nodes.get(node_id)
        last_ts = state.last["ts"] if state is not None and state.last else None
        reason = admission.freshness(
            sample["ts"], now=now, last_ts=last_ts, interval_s=sample["interval_s"]
        )
        if reason is not None:
            return reason
        field = admission.impossible(sample, self.registry.nodes[node_id].limits)
        if field is not None:
            if not self.dropped["impossible"]:
                log.warning("aggregator: node %s reports an impossible %s; dropped", node_id, field)
            return "impossible"
        return None

    @property
    def has_unknown(self) -> bool:
        return bool(self.pending)

    def add_sample(self, node_id: int, sample: dict, *, now: float) -> None:
        state = self.nodes.get(node_id)
        if state is None:
            state = self.nodes[node_id] = NodeLive()
        if now < self.observed_from:
            self.observed_from = _bucket_of(now)
        expires = now + max(LIVE_WINDOW_S, 2.0 * sample["interval_s"])
        state.stats_fresh = False
        if expires > self.clock():  # a re-read old sample feeds rollups only
            state.window.append((now, expires, sample))
            state.live.add_sample(sample)
        if self.bucket_start <= now < self.bucket_start + ROLLUP_S:
            state.bucket.add_sample(sample)
        else:  # re-read after a takeover (late), or read before its bucket opened (ahead)
            aside = self.late if now < self.bucket_start else self.ahead
            accs = aside.setdefault(_bucket_of(now), {})
            acc = accs.get(node_id)
            if acc is None:
                accs[node_id] = acc = Acc()
            acc.add_sample(sample)
        state.last = sample
        state.last_arrival = max(state.last_arrival, now)
        state.dirty = True
        self.samples_ok += 1
        if self.newest_ts is None or sample["ts"] > self.newest_ts:
            self.newest_ts = sample["ts"]

    def expire(self, now: float) -> None:
        for state in self.nodes.values():
            window = state.window
            while window and window[0][1] <= now:
                _, _, sample = window.popleft()
                state.live.add_sample(sample, sign=-1)
                state.dirty = True
                state.stats_fresh = False
            if not window and state.live.n:
                state.live = Acc()  # drop float residue

    # --- figures ------------------------------------------------------------------------------
    def stats_of(self, state: NodeLive) -> dict | None:
        """derive() of the node's window (computed when a node message or snapshot needs it)."""
        if not state.stats_fresh:
            state.stats = derive(state.live, state.live.dur) if not state.live.empty else None
            state.stats_fresh = True
        return state.stats

    def _refresh(self, state: NodeLive, now: float) -> bool:
        """Recompute a dirty node's row figures; True if they changed."""
        state.dirty = False
        state.stats_fresh = False
        live = state.live
        last = state.last
        if live.empty:
            fig = None
        else:
            fig = _figures(live)
        if last is not None:
            if fig is None:
                fig = [None] * 6
            fig[1] = last["power_source"]
            fig += [state.last_arrival, last["role"], last["simulated"]]
        changed = fig != state.fig
        state.fig = fig
        if changed:
            state.snap_dirty = True
        return changed

    def partial(self, now: float, *, full: bool = False) -> dict:
        """What this process reports to the merge this tick: per owned shard, the rate sums of
        its reporting nodes by (pipeline, simulated) and how many report; the figure rows of
        the nodes whose figures changed (all of them with `full`, and a rotating slice each
        tick, so a new leader knows every row within FULL_ROWS_S)."""
        self.expire(now)
        reg = self.registry
        shards = self.owned if self.owned is not None else range(SHARDS)
        groups: dict[int, dict] = {s: {} for s in shards}
        reporting = {s: [0, 0] for s in shards}
        rows: dict[int, list | None] = {}
        for nid, state in self.nodes.items():
            if state.dirty and self._refresh(state, now):
                rows[nid] = state.fig
            live = state.live
            if live.empty or live.dur <= 0:
                continue
            info = reg.nodes.get(nid)
            if info is None:
                continue
            sim = bool(info.simulated or (state.last and state.last["simulated"]))
            pid = info.pipeline_id if info.pipeline_id in reg.pipelines else None
            shard = groups.get(nid % SHARDS)
            if shard is None:  # not ours (a test feeding any node): left out
                continue
            group = shard.get((pid, sim))
            if group is None:
                shard[(pid, sim)] = group = Acc()
            group.add(live, 1.0 / live.dur)
            reporting[nid % SHARDS][sim] += 1
        order = list(self.nodes)
        if full:
            rows.update((nid, self.nodes[nid].fig) for nid in order)
        elif order:
            per_tick = -(-len(order) // max(1, round(FULL_ROWS_S / max(self.tick_s, 0.05))))
            start = self._rows_cursor % len(order)
            for nid in order[start : start + per_tick]:
                rows[nid] = self.nodes[nid].fig
            self._rows_cursor = start + per_tick
        return {
            "agg": self.agg_id,
            "ts": now,
            "newest_ts": self.newest_ts,
            "samples": self.samples_ok,
            "dropped": dict(self.dropped),
            "groups": {
                s: [(pid, sim, acc) for (pid, sim), acc in g.items()] for s, g in groups.items()
            },
            "reporting": reporting,
            "rows": {nid: fig for nid, fig in rows.items() if fig is not None},
        }

    def node_snapshot(self, now: float) -> dict[str, str]:
        """The snapshot fields of this process's nodes due now: never written, changed (at
        most every SNAPSHOT_MIN_S), or in the rotating slice (each every SNAPSHOT_FULL_S)."""
        reg = self.registry
        order = [nid for nid in reg.nodes if self.owns(nid)]
        per_tick = -(-len(order) // max(1, round(SNAPSHOT_FULL_S / max(self.tick_s, 0.05))))
        per_tick = min(per_tick, SNAPSHOT_SLICE_MAX)  # 10,000 nodes: each every ~33 s
        start = self._snapshot_cursor % len(order) if order else 0
        refresh = set(order[start : start + per_tick])
        self._snapshot_cursor = start + per_tick
        out = {}
        # Beyond the slice: nodes with new facts (a state change), and in a small fleet those
        # whose figures changed; a few hundred a tick at most (a big fleet has its slice).
        budget = 100
        small = per_tick < 50
        for nid in order:
            state = self.nodes.get(nid)
            if state is not None:
                due = state.written_at == -math.inf or (
                    small and state.snap_dirty and now - state.written_at >= SNAPSHOT_MIN_S
                )
                if nid not in refresh:
                    if not due or budget <= 0:
                        continue
                    budget -= 1
                state.written_at = now
                state.snap_dirty = False
            elif nid not in refresh:
                continue
            out[f"n:{nid}"] = json.dumps(self.node_message(nid, None, now, totals=True))
        return out

    def node_message(
        self, nid: int, node_rows: dict | None, now: float, totals: bool = False
    ) -> payloads.NodeUpdate:
        """A node-<id> group's message (this process owns the node). Its row is the merged
        one when `node_rows` has it, else composed from this process's own figures."""
        state = self.nodes.get(nid)
        if node_rows is not None and nid in node_rows:
            row = node_rows[nid]
        else:
            row = compose_row(self.registry.nodes[nid], state.fig if state else None, now)
        message: dict = {
            "type": "node.update",
            "ts": now,
            "newest_ts": self.newest_ts,
            "node": row,
            "stats": (self.stats_of(state) if state else None) or {},
            "last_measured": aged(state.last_measured, now) if state else None,
        }
        if totals:
            message["totals"] = self._totals(nid, state) if state else None
        return message

    def build(self, now: float) -> dict:
        """Everything one tick sends and stores when this process serves the whole fleet:
        {"fleet", "wall", "pipelines": {id: msg}, "node_rows": {id: row},
        "snapshot": {field: json to write}, "fields": {every field}}."""
        self.merge.apply(self.partial(now))
        built = self.merge.build(now, self.registry)
        built["snapshot"]["meta"] = self.meta(now, built["counters"])
        built["snapshot"].update(self.node_snapshot(now))
        built["fields"] = {"fleet", "meta", *(f"p:{p}" for p in self.registry.pipelines)} | {
            f"n:{nid}" for nid in self.registry.nodes
        }
        return built

    def meta(self, now: float, counters: dict) -> str:
        return json.dumps(
            {
                "ts": now,
                "started": self.started,
                "samples": counters["samples"],
                "dropped": counters["dropped"],
                "tick_s": self.tick_s,
                # how long the previous ticks took to build and send (s): last, max
                "tick_work_s": round(self.tick_work_s, 4),
                "tick_work_max_s": round(self.tick_work_max_s, 4),
            }
        )

    def _totals(self, nid: int, state: NodeLive) -> dict:
        """Counters since the start: closed buckets, the open one and those set aside."""
        aside = [accs[nid] for accs in (*self.late.values(), *self.ahead.values()) if nid in accs]
        return _totals(state, *aside)

    # --- rollups ------------------------------------------------------------------------------
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
            same_long = _long_bucket_of(start) == self.long_start
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
        self.bucket_start = _bucket_of(now)
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
            when = _now_iso(self.long_start)
            if span > 0:
                rows += [
                    _rollup("node", nid, ROLLUP_LONG_S, when, rollup_data(acc, span))
                    for nid, acc in longs.items()
                ]
            for state in self.nodes.values():
                state.long = Acc()
            self.long_start = _long_bucket_of(now)
        return rows, sums

    def _span(self, resolution: int, start: float) -> float:
        return start + resolution - max(start, self.observed_from)

    def _close(self, resolution: int, start: float, accs: dict, sums: list) -> list[dict]:
        span = self._span(resolution, start)
        if span <= 0:
            return []
        when = _now_iso(start)
        rows = []
        by_shard: dict[int, dict] = {s: {} for s in (self.owned or range(SHARDS))}
        reg = self.registry
        for nid, acc in accs.items():
            data = rollup_data(acc, span)
            rows.append(_rollup("node", nid, resolution, when, data))
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
        long_start = _long_bucket_of(start)
        for shard, groups in by_shard.items():
            sums.append((resolution, start, str(shard), span, groups))
            sums.append((ROLLUP_LONG_S, long_start, f"{shard}:{int(start)}", span, groups))
        return rows

    def close_buckets(self, now: float) -> list[dict]:
        """Rollup rows for every bucket that ended before `now` (dicts of Rollup fields), the
        pipeline and fleet ones summed in-process (this process owning every shard)."""
        rows, sums = self.close_shard_buckets(now)
        ten = [(start, span, groups) for res, start, _, span, groups in sums if res == ROLLUP_S]
        for start, span, groups in _by_start(ten):
            rows += scope_rollups(ROLLUP_S, start, span, groups)
            self._long_acc.setdefault(_long_bucket_of(start), []).extend(groups)
        for long_start in [s for s in self._long_acc if s + ROLLUP_LONG_S <= now]:
            merged: dict = {}
            for groups in self._long_acc.pop(long_start):
                _add_groups(merged, groups)
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


def _by_start(items: list) -> list[tuple[float, float, list]]:
    out: dict[float, tuple[float, list]] = {}
    for start, span, groups in items:
        held = out.setdefault(start, (span, []))
        held[1].append(groups)
    return [(start, span, groups) for start, (span, groups) in sorted(out.items())]


def _add_groups(into: dict, groups: dict) -> None:
    for pid, acc in groups.items():
        if pid not in into:
            into[pid] = Acc()
        into[pid].add(acc)


def scope_rollups(resolution: int, start: float, span: float, shard_groups: list) -> list[dict]:
    """Pipeline and fleet rollup rows of one bucket from the shards' {(pipeline, simulated):
    Acc} sums: one row per pipeline; the fleet's for all nodes, the real and the simulated."""
    merged: dict = {}
    for groups in shard_groups:
        _add_groups(merged, groups)
    when = _now_iso(start)
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
        rows.append(_rollup("pipeline", pid, resolution, when, rollup_data(acc, span)))
    fleet = by_class[False].copy()
    fleet.add(by_class[True])
    if not fleet.empty:
        rows.append(_rollup("fleet", FLEET_ALL, resolution, when, rollup_data(fleet, span)))
    for simulated, acc in by_class.items():
        if not acc.empty:
            scope_id = FLEET_SIMULATED if simulated else FLEET_REAL
            rows.append(_rollup("fleet", scope_id, resolution, when, rollup_data(acc, span)))
    return rows


def _figures(acc: Acc) -> list:
    """The row figures of a node's window, as derive() computes them (power_w, src, util,
    batch, tps, acc), without the rest of derive()'s work."""
    span = acc.dur if acc.dur > 1e-9 else 0.0
    steps = sum(acc.batch_hist.values())
    batch = (
        round(sum(size * count for size, count in acc.batch_hist.items()) / steps, 2)
        if steps > 0
        else None
    )
    return [
        round(acc.power_int / span, 1) if span else None,
        None,  # src: the last sample's, filled in by _refresh
        round(acc.util_int / acc.dur, 3) if acc.dur > 0 else None,
        batch,
        round(acc.gen_tokens / span, 2) if span else None,
        round(acc.accepted / acc.draft_tokens, 4) if acc.draft_tokens > 0 else None,
    ]


def _totals(state: NodeLive, *open_accs: Acc) -> dict:
    t = state.total.copy()
    for acc in (state.bucket, *open_accs):
        t.add(acc)
    last = state.last or {}
    return {
        "num_drafts": t.drafts,
        "num_draft_tokens": t.draft_tokens,
        "num_accepted_tokens": t.accepted,
        "num_accepted_tokens_per_pos": t.per_pos,
        "num_draft_tokens_per_pos": t.per_pos_drafts,
        "generation_tokens": t.gen_tokens,
        "ttft_hist": t.ttft_hist,
        "ttft_sum": t.ttft_sum,
        "itl_hist": t.itl_hist,
        "itl_sum": t.itl_sum,
        "energy_draft_j": t.energy_draft,
        "energy_verify_j": t.energy_verify,
        "power_w": last.get("power_w"),
        "power_source": last.get("power_source"),
        "running": last.get("num_requests_running"),
        "waiting": last.get("num_requests_waiting"),
        "utilization": last.get("utilization"),
    }


def rollup_data(acc: Acc, span: float) -> dict:
    """A rollup row's figures: derive()'s, and the draft rounds they rest on (`drafts`: how
    much a bucket's acceptance says, `merge.measured`)."""
    return {**derive(acc, span), "drafts": round(acc.drafts, 1)}


def _rollup(scope: str, scope_id: int, resolution: int, start: datetime, data: dict) -> dict:
    return {
        "scope": scope,
        "scope_id": scope_id,
        "resolution_s": resolution,
        "start": start,
        "data": data,
    }
