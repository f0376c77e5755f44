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

Access:
- `Authorization: Bearer <TANDEM_METRICS_TOKEN>` when that environment variable is set, or
- `Authorization: Bearer tdm_...`: an API key of a user with the view role, or
- with no TANDEM_METRICS_TOKEN set, requests from loopback (127.0.0.1, ::1) without a header.
Anything else: 401 (no/invalid credentials) or 403 (remote without credentials, no role).
"""

from __future__ import annotations

from django.conf import settings
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
from fleet.telemetry import admission
from fleet.telemetry.samples import LATENCY_BUCKETS
from fleet.telemetry.snapshot import read_all

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


class SnapshotCollector:
    def __init__(self, snapshot: dict[str, dict]):
        self.snapshot = snapshot

    def collect(self):
        snap = self.snapshot
        pipelines = {}
        fleet = snap.get("fleet") or {}
        for summary in fleet.get("pipelines", []):
            pipelines[summary["id"]] = summary
        labels = ["pipeline", "node", "role", "simulated"]
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
            "Node power draw (DCGM_FI_DEV_POWER_USAGE-like).",
            labels=plabels,
        )
        energy = CounterMetricFamily(
            P + "node_total_energy_consumption_joules",
            "Energy used since the aggregator started, by the role it was used for.",
            labels=[*plabels, "energy_role"],
        )
        util = GaugeMetricFamily(
            P + "node_utilization_ratio", "Device utilization 0..1.", labels=labels
        )
        state = GaugeMetricFamily(
            P + "node_state",
            "1 for the node's current state.",
            labels=["node", "state", "simulated"],
        )
        for key, entry in snap.items():
            if not key.startswith("n:"):
                continue
            row = entry.get("node") or {}
            name = row.get("name", key[2:])
            sim = _flag(row.get("sim"))
            state.add_metric([name, row.get("state", ""), sim], 1.0)
            totals = entry.get("totals")
            if not totals:
                continue
            pipe = pipelines.get(row.get("pipeline"), {}).get("name", "")
            lv = [pipe, name, row.get("role") or "", sim]
            c["spec_decode_num_drafts"].add_metric(lv, totals["num_drafts"])
            c["spec_decode_num_draft_tokens"].add_metric(lv, totals["num_draft_tokens"])
            c["spec_decode_num_accepted_tokens"].add_metric(lv, totals["num_accepted_tokens"])
            c["generation_tokens"].add_metric(lv, totals["generation_tokens"])
            for position, value in enumerate(totals["num_accepted_tokens_per_pos"]):
                per_pos.add_metric([*lv, str(position)], value)
            for position, value in enumerate(totals.get("num_draft_tokens_per_pos") or ()):
                per_pos_drafts.add_metric([*lv, str(position)], value)
            ttft.add_metric(lv, _cumulative(totals["ttft_hist"]), totals["ttft_sum"])
            itl.add_metric(lv, _cumulative(totals["itl_hist"]), totals["itl_sum"])
            source, sensor = _source(totals.get("power_source"))
            fresh = row.get("src") is not None  # no fresh telemetry: no current gauges
            if fresh:
                running.add_metric(lv, totals.get("running") or 0)
                waiting.add_metric(lv, totals.get("waiting") or 0)
                power.add_metric([*lv, source, sensor], totals.get("power_w") or 0.0)
                util.add_metric(lv, totals.get("utilization") or 0.0)
            energy.add_metric([*lv, source, sensor, "draft"], totals["energy_draft_j"])
            energy.add_metric([*lv, source, sensor, "verify"], totals["energy_verify_j"])
        yield from c.values()
        yield from (
            per_pos,
            per_pos_drafts,
            ttft,
            itl,
            running,
            waiting,
            power,
            energy,
            util,
            state,
        )
        yield from self._pipelines(pipelines.values())
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


def render_metrics(snapshot: dict[str, dict] | None = None) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot if snapshot is not None else read_all()))
    return generate_latest(registry)


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
    return HttpResponse(render_metrics(), content_type=CONTENT_TYPE_LATEST)
