"""The aggregator's synchronous core: parsing and admitting signed samples, the sliding live
windows per node, the per-shard partial a tick reports to the merge, the node snapshot fields,
and the 10 s / 5 min rollup buckets (`rollup_buckets`, node state in `node_live`).

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

from fleet.telemetry import admission, canonical, payloads
from fleet.telemetry.accumulators import Acc, derive
from fleet.telemetry.ingest import SHARDS, Verifier, unpack
from fleet.telemetry.merge import (
    ROLLUP_S,
    Merge,
    aged,
    compose_row,
)
from fleet.telemetry.node_live import NodeLive, node_figures, node_totals
from fleet.telemetry.registry import Registry
from fleet.telemetry.rollup_buckets import (
    RollupBuckets,
    bucket_of,
    long_bucket_of,
)
from fleet.telemetry.samples import InvalidSample

log = logging.getLogger("fleet.telemetry.aggregator")  # one logger for the whole aggregator

LIVE_WINDOW_S = 5.0
STALE_AFTER_S = 10.0
PENDING_MAX = 20_000
SNAPSHOT_FULL_S = 10.0  # every node's snapshot field is rewritten at least this often
SNAPSHOT_SLICE_MAX = 150  # ... unless that is more than this many a tick (then less often)
SNAPSHOT_MIN_S = 10.0  # and a changed one at most this often (the node page has its socket)
FULL_ROWS_S = 5.0  # every node's figure row goes to the merge at least this often


class Aggregation(RollupBuckets):
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
        self.bucket_start = bucket_of(self.started)
        self.long_start = long_bucket_of(self.started)
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
            self.observed_from = bucket_of(now)
        expires = now + max(LIVE_WINDOW_S, 2.0 * sample["interval_s"])
        state.stats_fresh = False
        if expires > self.clock():  # a re-read old sample feeds rollups only
            state.window.append((now, expires, sample))
            state.live.add_sample(sample)
        if self.bucket_start <= now < self.bucket_start + ROLLUP_S:
            state.bucket.add_sample(sample)
        else:  # re-read after a takeover (late), or read before its bucket opened (ahead)
            aside = self.late if now < self.bucket_start else self.ahead
            accs = aside.setdefault(bucket_of(now), {})
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
            fig = node_figures(live)
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
        return node_totals(state, *aside)
