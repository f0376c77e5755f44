"""`/metrics`: the fleet in Prometheus text format, from the aggregator's live snapshot.

Names follow what operators already know: vLLM's spec-decode counters under `tandem:`
(`tandem:spec_decode_num_drafts_total`, ..._num_draft_tokens_total,
..._num_accepted_tokens_total, ..._num_accepted_tokens_per_pos_total{position}),
`tandem:generation_tokens_total`, the TTFT and ITL histograms, running/waiting requests,
and DCGM-like per-node power and energy (`tandem:node_power_usage_watts`,
`tandem:node_total_energy_consumption_joules`) with `source="measured|modeled"`.
Counters are the aggregator's running totals since it started (a restart is a counter reset,
which Prometheus' rate() handles). Labels: pipeline, node, role, and `simulated="true|false"`
on every per-node, per-pipeline and fleet series (the simulator's nodes are never summed
with real ones by a query that filters on it; the fleet gauges come one per class).

Two shapes, the same metric names:
- per pipeline (the default): the node families summed over the nodes of each (pipeline,
  role, simulated), without a `node` label: a few hundred series at 10,000 nodes (~57 KB).
  Utilization is the mean of those nodes, power and requests their sums; node counts by state
  are `tandem:pipeline_nodes`. A node moved between pipelines takes its totals along, which the
  old pipeline's counters see as a reset (rate() handles it).
- per node (`?per_node=1`, or TANDEM_METRICS_PER_NODE=1): one series per node, as before, plus
  `tandem:node_state`. About 7 KB of text a node: for small fleets.
Both read the snapshot's node entries, never its pipeline messages (every node row again).
Both also carry vLLM's own names (`vllm:spec_decode_...`, per pipeline: `metrics_vllm`).

Access:
- `Authorization: Bearer <TANDEM_METRICS_TOKEN>` when that environment variable is set, or
- `Authorization: Bearer tdm_...`: an API key of a user with the view role, or
- with no TANDEM_METRICS_TOKEN set, requests from loopback (127.0.0.1, ::1) without a header.
Anything else: 401 (no/invalid credentials) or 403 (remote without credentials, no role).
"""

from __future__ import annotations

import json

import redis as redis_lib
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from fleet.accounts.access import can
from fleet.accounts.authentication import bearer_token
from fleet.accounts.principal import Refused, principal_for
from fleet.accounts.secrets import same
from fleet.telemetry import admission, metrics_vllm
from fleet.telemetry.ingest import client
from fleet.telemetry.metrics_slo import SloCollector
from fleet.telemetry.samples import LATENCY_BUCKETS
from fleet.telemetry.snapshot import LIVE_KEY
from inference.ledger_report import LedgerCollector

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
P = "tandem:"


def _source(power_source: str | None) -> tuple[str, str]:
    """(source, sensor): measured-nvml -> (measured, nvml), modeled -> (modeled, profile)."""
    if not power_source:
        return "modeled", "none"
    if power_source.startswith("measured-"):
        return "measured", power_source.split("-", 1)[1]
    return "modeled", "profile"


def _flag(value) -> str:
    return "true" if value else "false"


def _cumulative(counts: list[float]) -> list[tuple[str, float]]:
    out, running = [], 0.0
    for bound, count in zip(LATENCY_BUCKETS, counts, strict=False):
        running += count
        out.append((repr(float(bound)), running))
    running += counts[-1] if len(counts) > len(LATENCY_BUCKETS) else 0.0
    out.append(("+Inf", running))
    return out


def _add(into: list, values) -> None:
    """Element-wise sum of `values` into `into` (per-position counters, histogram buckets)."""
    for i, value in enumerate(values):
        if i < len(into):
            into[i] += value
        else:
            into.append(value)


class _Series:
    """The figures of one label set: a node (per-node series) or the nodes of one pipeline,
    role and class (aggregates). Counters and histograms are sums; of the current gauges,
    running/waiting/power are sums and utilization the mean of the nodes with fresh telemetry.
    """

    __slots__ = (
        "counters",
        "per_pos",
        "per_pos_drafts",
        "ttft",
        "ttft_sum",
        "itl",
        "itl_sum",
        "fresh",
        "running",
        "waiting",
        "util",
    )

    def __init__(self):
        self.counters = dict.fromkeys(COUNTER_TOTALS, 0.0)
        self.per_pos: list[float] = []
        self.per_pos_drafts: list[float] = []
        self.ttft: list[float] = []
        self.itl: list[float] = []
        self.ttft_sum = self.itl_sum = 0.0
        self.fresh = 0
        self.running = self.waiting = self.util = 0.0

    def add(self, totals: dict, fresh: bool) -> None:
        for name in COUNTER_TOTALS:
            self.counters[name] += totals[name]
        _add(self.per_pos, totals["num_accepted_tokens_per_pos"])
        _add(self.per_pos_drafts, totals.get("num_draft_tokens_per_pos") or ())
        _add(self.ttft, totals["ttft_hist"])
        _add(self.itl, totals["itl_hist"])
        self.ttft_sum += totals["ttft_sum"]
        self.itl_sum += totals["itl_sum"]
        if fresh:
            self.fresh += 1
            self.running += totals.get("running") or 0
            self.waiting += totals.get("waiting") or 0
            self.util += totals.get("utilization") or 0.0


COUNTER_TOTALS = (
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "generation_tokens",
)


class SnapshotCollector:
    """The snapshot as metric families. `per_node`: one series per node (label `node`);
    otherwise the same families summed per pipeline, role and class (no `node` label), so a
    10,000-node fleet is a few hundred series, and `sum by (pipeline)` queries read the same."""

    def __init__(self, snapshot: dict[str, dict], *, per_node: bool = False):
        self.snapshot = snapshot
        self.per_node = per_node

    def collect(self):
        snap = self.snapshot
        pipelines = {}
        fleet = snap.get("fleet") or {}
        for summary in fleet.get("pipelines", []):
            pipelines[summary["id"]] = summary
        labels = (
            ["pipeline", "node", "role", "simulated"]
            if self.per_node
            else [
                "pipeline",
                "role",
                "simulated",
            ]
        )
        c = {
            name: CounterMetricFamily(P + name, doc, labels=labels)
            for name, doc in (
                ("spec_decode_num_drafts", "Draft rounds verified."),
                ("spec_decode_num_draft_tokens", "Draft tokens proposed."),
                ("spec_decode_num_accepted_tokens", "Draft tokens accepted."),
                ("generation_tokens", "Tokens delivered (accepted + bonus)."),
            )
        }
        per_pos = CounterMetricFamily(
            P + "spec_decode_num_accepted_tokens_per_pos",
            "Accepted draft tokens by draft position.",
            labels=[*labels, "position"],
        )
        per_pos_drafts = CounterMetricFamily(
            P + "spec_decode_num_draft_tokens_per_pos",
            "Drafts that had a draft position (accepted / drafted at a position: its rate).",
            labels=[*labels, "position"],
        )
        ttft = HistogramMetricFamily(
            P + "time_to_first_token_seconds", "Time to first token.", labels=labels
        )
        itl = HistogramMetricFamily(
            P + "inter_token_latency_seconds", "Inter-token latency.", labels=labels
        )
        running = GaugeMetricFamily(P + "num_requests_running", "Requests running.", labels=labels)
        waiting = GaugeMetricFamily(P + "num_requests_waiting", "Requests waiting.", labels=labels)
        plabels = [*labels, "source", "sensor"]
        power = GaugeMetricFamily(
            P + "node_power_usage_watts",
            "Node power draw (DCGM_FI_DEV_POWER_USAGE-like; summed over the nodes of a "
            "series without a node label).",
            labels=plabels,
        )
        energy = CounterMetricFamily(
            P + "node_total_energy_consumption_joules",
            "Energy used since the aggregator started, by the role it was used for.",
            labels=[*plabels, "energy_role"],
        )
        util = GaugeMetricFamily(
            P + "node_utilization_ratio",
            "Device utilization 0..1 (the mean over the nodes of a series without a node label).",
            labels=labels,
        )
        state = GaugeMetricFamily(
            P + "node_state",
            "1 for the node's current state.",
            labels=["node", "state", "simulated"],
        )
        nodes = GaugeMetricFamily(
            P + "pipeline_nodes",
            "Nodes by pipeline, role, state and class.",
            labels=["pipeline", "role", "state", "simulated"],
        )
        series: dict[tuple, _Series] = {}
        # (*labels, source, sensor) -> [power W, draft J, verify J, nodes with fresh power]
        watts: dict[tuple, list[float]] = {}
        counted: dict[tuple, int] = {}
        for key, entry in snap.items():
            if not key.startswith("n:"):
                continue
            row = entry.get("node") or {}
            name = row.get("name", key[2:])
            sim = _flag(row.get("sim"))
            pipe = pipelines.get(row.get("pipeline"), {}).get("name", "")
            role = row.get("role") or ""
            node_state = row.get("state", "")
            if self.per_node:
                state.add_metric([name, node_state, sim], 1.0)
            nkey = (pipe, role, node_state, sim)
            counted[nkey] = counted.get(nkey, 0) + 1
            totals = entry.get("totals")
            if not totals:
                continue
            lv = (pipe, name, role, sim) if self.per_node else (pipe, role, sim)
            fresh = row.get("src") is not None  # no fresh telemetry: no current gauges
            one = series.get(lv)
            if one is None:
                one = series[lv] = _Series()
            one.add(totals, fresh)
            w = watts.setdefault((*lv, *_source(totals.get("power_source"))), [0.0, 0.0, 0.0, 0])
            if fresh:
                w[0] += totals.get("power_w") or 0.0
                w[3] += 1
            w[1] += totals["energy_draft_j"]
            w[2] += totals["energy_verify_j"]
        for lv, one in series.items():
            labels_ = list(lv)
            c["spec_decode_num_drafts"].add_metric(labels_, one.counters["num_drafts"])
            c["spec_decode_num_draft_tokens"].add_metric(labels_, one.counters["num_draft_tokens"])
            c["spec_decode_num_accepted_tokens"].add_metric(
                labels_, one.counters["num_accepted_tokens"]
            )
            c["generation_tokens"].add_metric(labels_, one.counters["generation_tokens"])
            for position, value in enumerate(one.per_pos):
                per_pos.add_metric([*labels_, str(position)], value)
            for position, value in enumerate(one.per_pos_drafts):
                per_pos_drafts.add_metric([*labels_, str(position)], value)
            ttft.add_metric(labels_, _cumulative(one.ttft), one.ttft_sum)
            itl.add_metric(labels_, _cumulative(one.itl), one.itl_sum)
            if one.fresh:
                running.add_metric(labels_, one.running)
                waiting.add_metric(labels_, one.waiting)
                util.add_metric(labels_, one.util / one.fresh)
        for wlabels, (power_w, draft_j, verify_j, n_fresh) in watts.items():
            if n_fresh:
                power.add_metric(list(wlabels), power_w)
            energy.add_metric([*wlabels, "draft"], draft_j)
            energy.add_metric([*wlabels, "verify"], verify_j)
        for nlabels, count in counted.items():
            nodes.add_metric(list(nlabels), count)
        yield from c.values()
        yield from (per_pos, per_pos_drafts, ttft, itl, running, waiting, power, energy, util)
        if self.per_node:
            yield state
        yield nodes
        yield from self._pipelines(pipelines.values())
        yield from metrics_vllm.families(series, _cumulative)
        yield from self._fleet(fleet, snap.get("meta") or {})

    def _pipelines(self, summaries):
        gauges = {
            field: GaugeMetricFamily(P + "pipeline_" + field, doc, labels=["pipeline", "simulated"])
            for field, doc in (
                ("acceptance_rate", "Accepted / drafted tokens (live window)."),
                ("mean_acceptance_length", "1 + accepted / drafts (live window)."),
                ("alpha", "Estimated per-token acceptance probability."),
                ("tokens_per_s", "Goodput: delivered tokens per second."),
                ("batch_mean", "Mean verifier batch size."),
                ("itl_p99_ms", "Inter-token latency p99 (ms)."),
                ("tokens_per_j", "Delivered tokens per joule (all nodes)."),
            )
        }
        for s in summaries:
            for field, gauge in gauges.items():
                value = s["stats"].get(field)
                if value is not None:
                    gauge.add_metric([s["name"], _flag(s.get("simulated"))], value)
        yield from gauges.values()

    def _fleet(self, fleet: dict, meta: dict):
        totals = fleet.get("totals") or {}
        power = GaugeMetricFamily(
            P + "fleet_power_watts", "Fleet power.", labels=["source", "simulated"]
        )
        tps = GaugeMetricFamily(
            P + "fleet_tokens_per_second", "Fleet goodput.", labels=["simulated"]
        )
        for sim, kpis in ((False, fleet.get("kpis")), (True, fleet.get("kpis_simulated"))):
            kpis = kpis or {}
            if kpis.get("power_w") is not None:
                power.add_metric(
                    [kpis.get("power_source") or "modeled", _flag(sim)], kpis["power_w"]
                )
            if kpis.get("tokens_per_s") is not None:
                tps.add_metric([_flag(sim)], kpis["tokens_per_s"])
        yield power
        yield tps
        nodes = GaugeMetricFamily(P + "fleet_nodes", "Nodes by state.", labels=["state"])
        for name, count in (totals.get("states") or {}).items():
            nodes.add_metric([name], count)
        yield nodes
        samples = CounterMetricFamily(P + "telemetry_samples", "Samples the aggregator took.")
        samples.add_metric([], meta.get("samples", 0))
        yield samples
        dropped = CounterMetricFamily(
            P + "telemetry_samples_dropped", "Samples dropped, by reason.", labels=["reason"]
        )
        for reason in admission.REASONS:
            dropped.add_metric([reason], (meta.get("dropped") or {}).get(reason, 0))
        yield dropped
        up = GaugeMetricFamily(P + "aggregator_last_tick_timestamp_seconds", "Last tick.")
        if meta.get("ts"):
            up.add_metric([], meta["ts"])
        yield up
        work = GaugeMetricFamily(
            P + "aggregator_tick_work_seconds",
            "Time the aggregator's last tick took to build and send (max: since it started).",
            labels=["stat"],
        )
        for stat, key in (("last", "tick_work_s"), ("max", "tick_work_max_s")):
            if meta.get(key) is not None:
                work.add_metric([stat], meta[key])
        yield work


def read_snapshot(*, redis=None) -> dict[str, dict]:
    """The snapshot fields /metrics uses: "fleet", "meta" and every node's "n:<id>" (not the
    pipeline messages "p:<id>", which repeat every node row of the pipeline)."""
    try:
        conn = redis or client()
        keys = [k.decode() if isinstance(k, bytes) else k for k in conn.hkeys(LIVE_KEY)]
        wanted = [k for k in keys if k in ("fleet", "meta") or k.startswith("n:")]
        values = conn.hmget(LIVE_KEY, wanted) if wanted else []
    except (redis_lib.RedisError, ImproperlyConfigured):  # no Redis: an empty scrape
        return {}
    out = {}
    for key, raw in zip(wanted, values, strict=True):
        if raw is None:
            continue
        try:
            out[key] = json.loads(raw)
        except ValueError:
            continue
    return out


def render_metrics(snapshot: dict[str, dict] | None = None, *, per_node: bool = False) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    collector = SnapshotCollector(
        snapshot if snapshot is not None else read_snapshot(), per_node=per_node
    )
    registry.register(collector)
    registry.register(LedgerCollector())  # the ledger's outcomes and dead letters
    registry.register(SloCollector())  # SLOs and supervised children, for the alert rules
    return generate_latest(registry)


def per_node_wanted(request) -> bool | None:
    """`?per_node=1|true|yes|0|false|no`, else settings.METRICS_PER_NODE; None when the
    value is none of these."""
    raw = request.GET.get("per_node")
    if raw is None:
        return bool(settings.METRICS_PER_NODE)
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    return None


def _refusal(request) -> HttpResponse | None:
    """None when the scrape may go on; else a 401, 403 or 429 (text, as Prometheus logs it).
    Allowed: the configured scrape token, an API key of a user who may view (through the
    same lockout as every other key login), or, with no token configured, loopback."""
    configured = settings.METRICS_TOKEN
    token = bearer_token(request)
    if token and configured and same(token, configured):
        return None
    if token:
        try:
            user = principal_for(request, session=False)
        except Refused as exc:
            return _text(exc.status, exc.detail, retry_after=exc.retry_after)
        return None if can(user, "view") else _text(403, "forbidden")
    if configured:
        return _text(401, "credentials required")
    if request.META.get("REMOTE_ADDR") in LOOPBACK:
        return None
    return _text(403, "forbidden")


def _text(status: int, reason: str, *, retry_after: int | None = None) -> HttpResponse:
    response = HttpResponse(f"metrics: {reason}\n", status=status, content_type="text/plain")
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    elif status == 401:
        response["WWW-Authenticate"] = "Bearer"
    return response


@require_GET
def metrics_view(request):
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    per_node = per_node_wanted(request)
    if per_node is None:
        return _text(400, "per_node must be 1/true or 0/false")
    return HttpResponse(render_metrics(per_node=per_node), content_type=CONTENT_TYPE_LATEST)
