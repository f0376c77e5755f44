"""The merge: pipeline and fleet figures from the aggregators' per-shard partials.

Each aggregator process owns some shards of the fleet (`fleet.telemetry.shards`) and, every
tick, reports a *partial* (`Aggregation.partial`): per shard, the per-second rate sums of its
reporting nodes grouped by (pipeline, simulated) — `Acc`s, which add exactly — and the figure
rows of the nodes whose figures changed. ONE process, the leader, merges the latest partial of
every shard into the messages a tick sends (fleet, wall, pipeline-<id>) and the snapshot's
fleet/pipeline fields. The cost of a merge is O(nodes) dictionary work plus O(shards x
pipelines) accumulator sums, independent of the sample rate.

No event loop, Redis or database here: `aggregator.Aggregator` moves partials over Redis,
`Aggregation.build` merges its own in-process (one process serving a small fleet).
"""

from __future__ import annotations

import json
from collections import Counter

from fleet.telemetry import payloads
from fleet.telemetry.accumulators import Acc, derive
from fleet.telemetry.registry import NodeInfo, Registry

STALE_AFTER_S = 10.0
PARTIAL_FRESH_S = 5.0  # a shard's partial older than this is left out (its owner died)
# The fleet's rollup rows (scope "fleet"): all nodes, the real ones, the simulated ones.
FLEET_ALL, FLEET_REAL, FLEET_SIMULATED = 0, 1, 2

# A node's figure row as partials carry it (compact): see `Aggregation.partial`.
POWER, SRC, UTIL, BATCH, TPS, ACC, SEEN, LAST_ROLE, LAST_SIM = range(9)


def compose_row(info: NodeInfo, fig: list | None, now: float) -> payloads.NodeRow:
    """One fleet-table row: the registry's facts about a node and its latest figures."""
    fresh = fig is not None and now - fig[SEEN] <= STALE_AFTER_S
    return _row(info, fig, fresh, round(now - fig[SEEN], 1) if fig else None)


def _row(info: NodeInfo, fig: list | None, fresh: bool, seen_s: float | None) -> payloads.NodeRow:
    return {
        "id": info.id,
        "name": info.name,
        "state": info.state,
        "role": info.role or (fig[LAST_ROLE] if fig else None),
        "pipeline": info.pipeline_id,
        "sim": info.simulated or bool(fig and fig[LAST_SIM]),
        "kind": info.kind,
        "power_w": fig[POWER] if fig else None,
        "src": fig[SRC] if (fig and fresh) else None,
        "util": fig[UTIL] if fig else None,
        "batch": fig[BATCH] if fig else None,
        "tps": fig[TPS] if fig else None,
        "acc": fig[ACC] if fig else None,
        "seen_s": seen_s,
    }


def _role(row: payloads.NodeRow) -> str:
    return row["role"] or ""


def _name(row: payloads.NodeRow) -> str:
    return row["name"]


class Merge:
    """The leader's view: latest partial per shard, latest figures per node."""

    def __init__(self) -> None:
        self.figs: dict[int, list] = {}
        # node id -> (info, fig, row): the row is rebuilt when either changes (by identity);
        # a tick only copies it with its age (`seen_s`) and freshness
        self._rows: dict[int, tuple] = {}
        # shard -> (ts, [(pipeline id | None, simulated, Acc)], reporting [real, simulated])
        self.shards: dict[int, tuple[float, list, list]] = {}
        self.newest_ts: float | None = None
        self.counters: dict[str, dict] = {}  # aggregator id -> {"samples", "dropped", "ts"}
        # last acceptance figures per pipeline ("p", id) / fleet class ("fleet", simulated):
        # the last closed rollup bucket with enough draft rounds (`observe_rollups`)
        self.last_measured: dict[tuple, dict | None] = {}

    def apply(self, partial: dict) -> None:
        """Take one partial (`Aggregation.partial`, decoded). Partials of one shard arrive in
        order; an older partial than the one held is ignored (a shard's previous owner)."""
        ts = partial["ts"]
        for shard, groups in partial["groups"].items():
            held = self.shards.get(shard)
            if held is None or held[0] <= ts:
                self.shards[shard] = (ts, groups, partial["reporting"][shard])
        self.figs.update(partial["rows"])
        newest = partial.get("newest_ts")
        if newest is not None and (self.newest_ts is None or newest > self.newest_ts):
            self.newest_ts = newest
        self.counters[partial["agg"]] = {
            "samples": partial.get("samples", 0),
            "dropped": partial.get("dropped", {}),
            "ts": ts,
        }

    def observe_rollups(self, rows: list[dict]) -> None:
        """Take the pipeline and fleet rollup rows of closed buckets: each 10 s one with enough
        draft rounds becomes its scope's last measured acceptance (what the charts' last point
        with data says), unless a later bucket is held already."""
        for row in rows:
            if row["resolution_s"] != ROLLUP_S:
                continue
            if row["scope"] == "pipeline":
                key: tuple = ("p", row["scope_id"])
            elif row["scope"] == "fleet" and row["scope_id"] in (FLEET_REAL, FLEET_SIMULATED):
                key = ("fleet", row["scope_id"] == FLEET_SIMULATED)
            else:
                continue
            end = row["start"].timestamp() + row["resolution_s"]
            self.last_measured[key] = newer(self.last_measured.get(key), measured(row["data"], end))

    def forget(self, node_ids) -> None:
        for nid in node_ids:
            self.figs.pop(nid, None)
            self._rows.pop(nid, None)

    def build(self, now: float, reg: Registry) -> dict:
        """{"fleet", "wall", "pipelines": {id: msg}, "node_rows": {id: row},
        "snapshot": {"fleet", "p:<id>": json}, "counters": summed samples/dropped}."""
        groups: dict[tuple[int | None, bool], Acc] = {}
        reporting = [0, 0]
        for shard, (ts, shard_groups, shard_reporting) in list(self.shards.items()):
            if now - ts > PARTIAL_FRESH_S:
                del self.shards[shard]
                continue
            reporting[0] += shard_reporting[0]
            reporting[1] += shard_reporting[1]
            for pid, sim, acc in shard_groups:
                key = (pid if pid in reg.pipelines else None, bool(sim))
                group = groups.get(key)
                if group is None:
                    groups[key] = group = Acc()
                group.add(acc)
        pipe_rows: dict[int, list] = {pid: [] for pid in reg.pipelines}
        counts: dict[int, Counter] = {pid: Counter() for pid in reg.pipelines}
        rows: list[payloads.NodeRow] = []
        node_rows: dict[int, payloads.NodeRow] = {}
        states: Counter = Counter()
        class_states: dict[bool, Counter] = {False: Counter(), True: Counter()}
        simulated = 0
        figs, cache = self.figs, self._rows
        stale_before = now - STALE_AFTER_S
        for nid, info in reg.nodes.items():
            fig = figs.get(nid)
            cached = cache.get(nid)
            if cached is None or cached[0] is not info or cached[1] is not fig:
                cached = cache[nid] = (info, fig, _row(info, fig, True, None))
            if fig is None:
                row = cached[2].copy()
            else:
                seen = fig[SEEN]
                row = {**cached[2], "seen_s": round(now - seen, 1)}
                if seen < stale_before:
                    row["src"] = None
            rows.append(row)
            node_rows[nid] = row
            states[info.state] += 1
            class_states[row["sim"]][info.state] += 1
            simulated += row["sim"]
            pid = info.pipeline_id
            if pid in pipe_rows:
                pipe_rows[pid].append(row)
                if info.role:
                    counts[pid][info.role] += 1
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
                states=dict(class_states[sim]),
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
                "last_measured": self._last(("p", pid), now),
            }
            summaries.append(summary)
            pipeline_msgs[pid] = {
                "type": "pipeline.update",
                "ts": now,
                "newest_ts": self.newest_ts,
                "pipeline": summary,
                "config": pinfo.config,
                "nodes": payloads.shown_per_role(pipe_rows[pid], _role, _name),
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
        snapshot = {"fleet": json.dumps(wall)}
        for pid, msg in pipeline_msgs.items():
            snapshot[f"p:{pid}"] = json.dumps(msg)
        samples, dropped = 0, Counter[str]()
        for aid, c in list(self.counters.items()):
            if now - c["ts"] > 60.0:
                del self.counters[aid]
                continue
            samples += c["samples"]
            dropped.update(c["dropped"])
        return {
            "fleet": fleet,
            "wall": wall,
            "pipelines": pipeline_msgs,
            "node_rows": node_rows,
            "snapshot": snapshot,
            "counters": {"samples": samples, "dropped": dict(dropped)},
        }

    def _last(self, key, now: float) -> payloads.LastMeasured | None:
        return aged(self.last_measured.get(key), now)

    def _kpis(
        self, key, stats: dict, *, nodes: int, states: dict, reporting: int, now: float
    ) -> payloads.Kpis:
        return {
            "nodes": nodes,
            "states": states,
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
            "last_measured": self._last(key, now),
        }


LAST_MEASURED_FIELDS = ("acceptance_rate", "alpha", "mean_acceptance_length")
ROLLUP_S = 10  # the short rollup buckets (aggregation's), where last measured figures come from
# A bucket with fewer draft rounds than this says too little to headline: the tail of a burst
# (one round, none accepted) read "0.0 % / 1.00" while the chart's last bucket said 16.7 %.
MIN_DRAFTS = 10


def measured(data: dict, at: float) -> dict | None:
    """The last measured figures of one closed rollup bucket (its rollup data, which carries
    `drafts`; `at`: its end), or None when it holds fewer than MIN_DRAFTS draft rounds."""
    if (data.get("drafts") or 0) < MIN_DRAFTS or data.get("acceptance_rate") is None:
        return None
    out = {name: data.get(name) for name in LAST_MEASURED_FIELDS}
    out["tokens_per_s"] = data.get("tokens_per_s")
    out["last_measured_at"] = at
    return out


def newer(last: dict | None, candidate: dict | None) -> dict | None:
    """The later of two last measured figures (a late bucket closing never replaces a newer)."""
    if candidate is None:
        return last
    if last is not None and last["last_measured_at"] > candidate["last_measured_at"]:
        return last
    return candidate


def aged(last: dict | None, now: float) -> payloads.LastMeasured | None:
    if last is None:
        return None
    age = round(max(now - last["last_measured_at"], 0.0), 1)
    return {**last, "age_s": age}
