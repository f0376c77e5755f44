"""The aggregator's synchronous core: parsing and admitting signed samples, the sliding live
windows per node, the messages one tick sends (fleet, wall, pipeline, node), the live
snapshot's fields, and the 10 s / 5 min rollup figures.

No event loop, Redis, channel layer or database here (tests/test_walls.py guards it): the
runner, `aggregator.Aggregator`, reads the stream, sends, and writes what this builds.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

from fleet.telemetry import admission, payloads
from fleet.telemetry.accumulators import Acc, derive
from fleet.telemetry.ingest import verify
from fleet.telemetry.registry import NodeInfo, Registry
from fleet.telemetry.samples import InvalidSample, normalize

log = logging.getLogger("fleet.telemetry.aggregator")  # one logger for the whole aggregator

LIVE_WINDOW_S = 5.0
STALE_AFTER_S = 10.0
ROLLUP_S = 10
ROLLUP_LONG_S = 300
PENDING_MAX = 20_000
SNAPSHOT_FULL_S = 5.0
# The fleet's rollup rows (scope "fleet"): all nodes, the real ones, the simulated ones.
FLEET_ALL, FLEET_REAL, FLEET_SIMULATED = 0, 1, 2


@dataclass
class NodeLive:
    window: deque = field(default_factory=deque)  # (arrival, expires, sample)
    live: Acc = field(default_factory=Acc)
    total: Acc = field(default_factory=Acc)  # since the aggregator started: /metrics counters
    bucket: Acc = field(default_factory=Acc)  # current 10 s rollup bucket
    long: Acc = field(default_factory=Acc)  # current 5 min rollup bucket
    last: dict | None = None
    last_arrival: float = 0.0
    dirty: bool = True
    stats: dict | None = None
    last_measured: dict | None = None  # LastMeasured without age_s


def _now_iso(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


class Aggregation:
    """The aggregator's state and arithmetic, without the loop: feed it stream entries
    (`ingest_entry`), ask it what a tick sends (`build`) and which rollups are due
    (`close_buckets`). Clock-injected: every method takes `now`."""

    def __init__(self, *, tick_s: float = 0.5, clock=time.time, registry: Registry | None = None):
        self.tick_s = tick_s
        self.clock = clock
        self.registry = registry or Registry()
        self.nodes: dict[int, NodeLive] = {}
        self.pending: deque = deque(maxlen=PENDING_MAX)
        self.dropped: Counter = Counter()
        self.samples_ok = 0
        self.newest_ts: float | None = None
        self.started = clock()
        self.bucket_start = math.floor(self.started / ROLLUP_S) * ROLLUP_S
        self.long_start = math.floor(self.started / ROLLUP_LONG_S) * ROLLUP_LONG_S
        self.messages_sent = 0
        self._written_fields: set[str] = set()
        self._snapshot_cursor = 0
        self.tick_work_s = 0.0
        self.tick_work_max_s = 0.0
        # last acceptance figures per pipeline / fleet class, kept when traffic stops
        self.last_measured: dict[tuple, dict | None] = {}

    # --- ingest -------------------------------------------------------------------------------
    def set_registry(self, registry: Registry) -> None:
        changed = {
            nid for nid, info in registry.nodes.items() if self.registry.nodes.get(nid) != info
        }
        self.registry = registry
        for nid in changed:
            if nid in self.nodes:
                self.nodes[nid].dirty = True
        for nid in list(self.nodes):
            if nid not in registry.nodes:  # retired or deleted
                del self.nodes[nid]
        pending, self.pending = list(self.pending), deque(maxlen=PENDING_MAX)
        for fields, arrival in pending:
            self.ingest_entry(fields, now=arrival, retry=False)

    def ingest_entry(self, fields: dict, *, now: float, retry: bool = True) -> bool:
        """One stream entry {node, body, sig}: verify, parse, add. False if dropped."""
        try:
            node_id = int(_text(fields.get(b"node", fields.get("node"))))
            body = fields.get(b"body", fields.get("body"))
            signature = _text(fields.get(b"sig", fields.get("sig")))
        except (TypeError, ValueError):
            self.dropped["malformed"] += 1
            return False
        if node_id not in self.registry.nodes:
            if retry:
                self.pending.append((fields, now))  # registered a moment ago? next refresh
            else:
                self.dropped["unknown_node"] += 1
            return False
        if body is None or not verify(body, signature, self.registry.keys.get(node_id, ())):
            self.dropped["bad_signature"] += 1
            return False
        try:
            sample = normalize(json.loads(body))
        except (ValueError, InvalidSample, RecursionError):
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
        expires = now + max(LIVE_WINDOW_S, 2.0 * sample["interval_s"])
        state.window.append((now, expires, sample))
        state.live.add_sample(sample)
        state.total.add_sample(sample)
        state.bucket.add_sample(sample)
        state.last = sample
        state.last_arrival = now
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
            if not window and state.live.n:
                state.live = Acc()  # drop float residue

    # --- live messages -------------------------------------------------------------------------
    def _row(self, info: NodeInfo, state: NodeLive | None, now: float) -> payloads.NodeRow:
        stats = state.stats if state else None
        last = state.last if state else None
        fresh = state is not None and now - state.last_arrival <= STALE_AFTER_S
        return {
            "id": info.id,
            "name": info.name,
            "state": info.state,
            "role": info.role or (last["role"] if last else None),
            "pipeline": info.pipeline_id,
            "sim": info.simulated or bool(last and last["simulated"]),
            "kind": info.kind,
            "power_w": stats["power_w"] if stats else None,
            "src": last["power_source"] if (last and fresh) else None,
            "util": stats["utilization"] if stats else None,
            "batch": stats["batch_mean"] if stats else None,
            "tps": stats["tokens_per_s"] if stats else None,
            "acc": stats["acceptance_rate"] if stats else None,
            "seen_s": round(now - state.last_arrival, 1) if state and state.last else None,
        }

    def build(self, now: float) -> dict:
        """Everything one tick sends and stores: {"fleet", "wall", "pipelines": {id: msg},
        "node_rows": {id: row}, "snapshot": {field: json to write}, "fields": {every field}}.

        Costs O(nodes + pipelines): a node's figures are re-derived only when its window
        changed, pipelines sum their nodes' per-second rates, the fleet sums the pipelines.
        Node snapshot fields are rewritten when they changed, and each at least every
        SNAPSHOT_FULL_S in a rotating slice (so ages stay right for first renders)."""
        self.expire(now)
        reg = self.registry
        # per (pipeline or None, simulated): each node is added once; pipelines, the real and
        # simulated classes and the fleet are sums of these few groups
        groups: dict[tuple[int | None, bool], Acc] = {}
        pipe_rows: dict[int, list] = {pid: [] for pid in reg.pipelines}
        counts: dict[int, Counter] = {pid: Counter() for pid in reg.pipelines}
        rows: list[payloads.NodeRow] = []
        node_rows: dict[int, payloads.NodeRow] = {}
        changed: set[int] = set()
        states: Counter = Counter()
        simulated = 0
        reporting: Counter = Counter()
        for nid, info in reg.nodes.items():
            state = self.nodes.get(nid)
            if state is not None and state.dirty:
                state.stats = derive(state.live, state.live.dur) if not state.live.empty else None
                state.last_measured = _remember(state.last_measured, state.stats, now)
                state.dirty = False
                changed.add(nid)
            row = self._row(info, state, now)
            rows.append(row)
            node_rows[nid] = row
            states[info.state] += 1
            simulated += row["sim"]
            pid = info.pipeline_id
            placed = pid in reg.pipelines
            if placed:
                pipe_rows[pid].append(row)
                if info.role:
                    counts[pid][info.role] += 1
            if state is not None and not state.live.empty:
                key = (pid if placed else None, row["sim"])
                group = groups.get(key)
                if group is None:
                    group = groups[key] = Acc()
                group.add_rates_of(state.live)
                reporting[row["sim"]] += 1
        pipe_accs: dict[int, Acc] = {}
        for pid in reg.pipelines:
            real, sim = groups.get((pid, False)), groups.get((pid, True))
            if real is not None and sim is not None:
                real = real.copy()
                real.add(sim)
            pipe_accs[pid] = real or sim or Acc()
        # the headline KPIs never mix classes: real and simulated nodes are summed apart
        by_class = {False: Acc(), True: Acc()}
        for (_, sim_group), acc in groups.items():
            by_class[sim_group].add(acc)
        fleet_acc = by_class[False].copy()
        fleet_acc.add(by_class[True])
        fleet_stats = derive(fleet_acc, 1.0)
        kpis = {
            sim: self._kpis(
                ("fleet", sim),
                derive(by_class[sim], 1.0),
                nodes=simulated if sim else len(rows) - simulated,
                reporting=reporting[sim],
                now=now,
            )
            for sim in (False, True)
        }
        summaries: list[payloads.PipelineSummary] = []
        pipeline_msgs: dict[int, payloads.PipelineUpdate] = {}
        for key in [k for k in self.last_measured if k[0] == "p" and k[1] not in reg.pipelines]:
            del self.last_measured[key]  # a deleted pipeline
        for pid, pinfo in reg.pipelines.items():
            pstats = derive(pipe_accs[pid], 1.0)
            summary: payloads.PipelineSummary = {
                "id": pid,
                "name": pinfo.name,
                "simulated": pinfo.simulated,
                "drafters": counts[pid]["draft"],
                "verifiers": counts[pid]["verify"],
                "stats": pstats,
                "last_measured": self._last(("p", pid), pstats, now),
            }
            summaries.append(summary)
            pipeline_msgs[pid] = {
                "type": "pipeline.update",
                "ts": now,
                "newest_ts": self.newest_ts,
                "pipeline": summary,
                "config": pinfo.config,
                "nodes": pipe_rows[pid],
            }
        totals: payloads.FleetTotals = {
            "nodes": len(rows),
            "states": dict(states),
            "power_w": fleet_stats["power_w"],
            "power_source": fleet_stats["power_source"],
            "tokens_per_s": fleet_stats["tokens_per_s"],
            "tokens_per_j": fleet_stats["tokens_per_j"],
            "simulated_nodes": simulated,
        }
        wall: payloads.FleetUpdate = {
            "type": "fleet.update",
            "ts": now,
            "newest_ts": self.newest_ts,
            "totals": totals,
            "kpis": kpis[False],
            "kpis_simulated": kpis[True],
            "stats": fleet_stats,
            "pipelines": summaries,
        }
        fleet: payloads.FleetUpdate = {**wall, "nodes": rows}
        snapshot = {
            "fleet": json.dumps(wall),
            "meta": json.dumps(
                {
                    "ts": now,
                    "started": self.started,
                    "samples": self.samples_ok,
                    "dropped": dict(self.dropped),
                    "tick_s": self.tick_s,
                    # how long the previous ticks took to build and send (s): last, max
                    "tick_work_s": round(self.tick_work_s, 4),
                    "tick_work_max_s": round(self.tick_work_max_s, 4),
                }
            ),
        }
        fields = {"fleet", "meta"}
        for pid, msg in pipeline_msgs.items():
            snapshot[f"p:{pid}"] = json.dumps(msg)
            fields.add(f"p:{pid}")
        # Besides the changed nodes, rewrite a rotating slice, so every node's field is at
        # most SNAPSHOT_FULL_S old without a spike of work every SNAPSHOT_FULL_S.
        order = list(node_rows)
        per_tick = -(-len(order) // max(1, round(SNAPSHOT_FULL_S / max(self.tick_s, 0.05))))
        start = self._snapshot_cursor % len(order) if order else 0
        refresh = set(order[start : start + per_tick])
        self._snapshot_cursor = start + per_tick
        for nid in order:
            fields.add(f"n:{nid}")
            if nid in changed or nid in refresh:
                snapshot[f"n:{nid}"] = json.dumps(self.node_message(nid, node_rows, now, True))
        return {
            "fleet": fleet,
            "wall": wall,
            "pipelines": pipeline_msgs,
            "node_rows": node_rows,
            "snapshot": snapshot,
            "fields": fields,
        }

    def node_message(
        self, nid: int, node_rows: dict, now: float, totals: bool = False
    ) -> payloads.NodeUpdate:
        state = self.nodes.get(nid)
        message: dict = {
            "type": "node.update",
            "ts": now,
            "newest_ts": self.newest_ts,
            "node": node_rows[nid],
            "stats": (state.stats if state else None) or {},
            "last_measured": _aged(state.last_measured, now) if state else None,
        }
        if totals:
            message["totals"] = _totals(state) if state else None
        return message

    def _last(self, key, stats: dict, now: float) -> payloads.LastMeasured | None:
        self.last_measured[key] = remembered = _remember(self.last_measured.get(key), stats, now)
        return _aged(remembered, now)

    def _kpis(self, key, stats: dict, *, nodes: int, reporting: int, now: float) -> payloads.Kpis:
        return {
            "nodes": nodes,
            "reporting": reporting,
            "tokens_per_s": stats["tokens_per_s"],
            "power_w": stats["power_w"],
            "power_source": stats["power_source"],
            "power_draft_w": stats["power_draft_w"],
            "power_verify_w": stats["power_verify_w"],
            "tokens_per_j": stats["tokens_per_j"],
            "tokens_per_j_draft": stats["tokens_per_j_draft"],
            "tokens_per_j_verify": stats["tokens_per_j_verify"],
            "acceptance_rate": stats["acceptance_rate"],
            "mean_acceptance_length": stats["mean_acceptance_length"],
            "alpha": stats["alpha"],
            "last_measured": self._last(key, stats, now),
        }

    # --- rollups ------------------------------------------------------------------------------
    def close_buckets(self, now: float) -> list[dict]:
        """Rollup rows for every bucket that ended before `now` (dicts of Rollup fields)."""
        rows: list[dict] = []
        if now < self.bucket_start + ROLLUP_S:
            return rows
        rows += self._close(ROLLUP_S, self.bucket_start, "bucket")
        for state in self.nodes.values():
            state.long.add(state.bucket)
            state.bucket = Acc()
        self.bucket_start = math.floor(now / ROLLUP_S) * ROLLUP_S
        if now >= self.long_start + ROLLUP_LONG_S:
            rows += self._close(ROLLUP_LONG_S, self.long_start, "long")
            for state in self.nodes.values():
                state.long = Acc()
            self.long_start = math.floor(now / ROLLUP_LONG_S) * ROLLUP_LONG_S
        return rows

    def _close(self, resolution: int, start: float, attr: str) -> list[dict]:
        span = start + resolution - max(start, self.started)
        if span <= 0:
            return []
        when = _now_iso(start)
        rows = []
        fleet = Acc()
        by_class = {False: Acc(), True: Acc()}  # real and simulated nodes apart
        pipes: dict[int, Acc] = {}
        for nid, state in self.nodes.items():
            acc: Acc = getattr(state, attr)
            if acc.empty:
                continue
            rows.append(_rollup("node", nid, resolution, when, derive(acc, span)))
            fleet.add(acc)
            info = self.registry.nodes.get(nid)
            simulated = bool((info and info.simulated) or (state.last or {}).get("simulated"))
            by_class[simulated].add(acc)
            if info and info.pipeline_id is not None:
                pipes.setdefault(info.pipeline_id, Acc()).add(acc)
        for pid, acc in pipes.items():
            rows.append(_rollup("pipeline", pid, resolution, when, derive(acc, span)))
        if not fleet.empty:
            rows.append(_rollup("fleet", FLEET_ALL, resolution, when, derive(fleet, span)))
        for simulated, acc in by_class.items():
            if not acc.empty:
                scope_id = FLEET_SIMULATED if simulated else FLEET_REAL
                rows.append(_rollup("fleet", scope_id, resolution, when, derive(acc, span)))
        return rows


LAST_MEASURED_FIELDS = ("acceptance_rate", "alpha", "mean_acceptance_length")


def _remember(last: dict | None, stats: dict | None, now: float) -> dict | None:
    """The last acceptance figures measured: `stats`' when it has any, else `last` (kept)."""
    if not stats or stats.get("acceptance_rate") is None:
        return last
    out = {name: stats.get(name) for name in LAST_MEASURED_FIELDS}
    tps = stats.get("tokens_per_s")
    out["tokens_per_s"] = tps if tps else (last or {}).get("tokens_per_s")
    out["last_measured_at"] = now
    return out


def _aged(last: dict | None, now: float) -> payloads.LastMeasured | None:
    if last is None:
        return None
    age = round(max(now - last["last_measured_at"], 0.0), 1)
    return {**last, "age_s": age}


def _text(value) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if value is None:
        raise ValueError("missing")
    return str(value)


def _totals(state: NodeLive) -> dict:
    t = state.total
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


def _rollup(scope: str, scope_id: int, resolution: int, start: datetime, data: dict) -> dict:
    return {
        "scope": scope,
        "scope_id": scope_id,
        "resolution_s": resolution,
        "start": start,
        "data": data,
    }
