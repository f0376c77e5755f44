"""The conditions of compose/prometheus/alerts.yml, evaluated by Tandem itself from what it
already holds (the registry, the 10 s rollups, the supervisor's state file), so a one-machine
install without Prometheus sees them too. `firing()` only reads; `alert_state.sync` records
firing and resolved.

Where Tandem's own data differ from Prometheus's, the rule says how:
- node lost: a placed node marked lost, or whose heartbeat is older than the liveness window
  (`Node.is_lost`), without waiting for the beat task that marks it;
- no goodput: every 10 s rollup of the pipeline over the last NO_GOODPUT_WINDOW shows requests
  waiting and no tokens delivered (a pipeline that sends no samples at all writes no rollups:
  its nodes are then lost, which is its own alert);
- ITL / TTFT SLO burn: the rollups keep each bucket's p99, not the histogram, so the burn is
  "most of the last SLO_WINDOW's buckets have their p99 over the SLO" (at least SLO_MIN_BUCKETS
  of them measured), the fast window of the multiwindow rule;
- a child of `manage.py up` given up on (state failed).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from fleet.nodes.choices import TERMINAL_STATES, NodeState
from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline, Placement
from fleet.runtime.supervision import FAILED, read_state
from fleet.telemetry.models import Rollup, Scope

NO_GOODPUT_WINDOW = timedelta(minutes=2)  # alerts.yml: for: 2m
NO_GOODPUT_MIN_BUCKETS = 3
SLO_WINDOW = timedelta(minutes=5)  # alerts.yml: the fast burn's short window
SLO_MIN_BUCKETS = 3


@dataclass(frozen=True)
class Alert:
    key: str
    name: str
    severity: str
    summary: str
    pipeline_id: int | None = None
    node_id: int | None = None


def firing(now: datetime | None = None, data_dir=None) -> list[Alert]:
    """Every condition firing at `now`, in a stable order."""
    now = now or timezone.now()
    found = [*nodes_lost(now), *pipelines_burning(now), *children_given_up(data_dir)]
    return sorted(found, key=lambda a: a.key)


def nodes_lost(now: datetime) -> list[Alert]:
    cutoff = now - Node.liveness_window()
    placements = (
        Placement.objects.exclude(node__state__in=TERMINAL_STATES)
        .filter(Q(node__state=NodeState.LOST) | Q(node__last_seen__lt=cutoff))
        .select_related("node", "pipeline")
    )
    out = []
    for p in placements:
        node = p.node
        # a summary that stays put while the node stays lost (sync rewrites a changed one)
        seen = (
            f"last heartbeat {node.last_seen:%Y-%m-%d %H:%M:%S} UTC"
            if node.last_seen
            else "no heartbeat"
        )
        out.append(
            Alert(
                key=f"node_lost:{node.pk}",
                name="TandemNodeLost",
                severity="page",
                summary=f"Node {node.name} ({p.role} of {p.pipeline.name}) lost: {seen}",
                pipeline_id=p.pipeline_id,
                node_id=node.pk,
            )
        )
    return out


def _recent(pipeline_ids, since: datetime) -> dict[int, list[dict]]:
    rows = Rollup.objects.filter(
        scope=Scope.PIPELINE, scope_id__in=pipeline_ids, resolution_s=10, start__gte=since
    ).values_list("scope_id", "data")
    by_pipeline: dict[int, list[dict]] = {}
    for pid, data in rows:
        by_pipeline.setdefault(pid, []).append(data or {})
    return by_pipeline


def no_goodput(buckets: list[dict]) -> bool:
    """Requests waiting and nothing delivered in every bucket (enough of them to tell)."""
    if len(buckets) < NO_GOODPUT_MIN_BUCKETS:
        return False
    return all((b.get("waiting") or 0) > 0 and not (b.get("tokens_per_s") or 0) for b in buckets)


def slo_burning(buckets: list[dict], field: str, slo_ms: float | None) -> float | None:
    """The median bucket p99 (ms) when more than half of the measured buckets are over the
    SLO, else None."""
    if slo_ms is None:
        return None
    values = sorted(v for b in buckets if (v := b.get(field)) is not None)
    if len(values) < SLO_MIN_BUCKETS:
        return None
    over = sum(1 for v in values if v > slo_ms)
    return values[len(values) // 2] if over * 2 > len(values) else None


def pipelines_burning(now: datetime) -> list[Alert]:
    pipelines = list(Pipeline.objects.only("id", "name", "slo_itl_p99_ms", "slo_ttft_p99_ms"))
    if not pipelines:
        return []
    goodput = _recent([p.pk for p in pipelines], now - NO_GOODPUT_WINDOW)
    slo = _recent([p.pk for p in pipelines], now - SLO_WINDOW)
    out = []
    for p in pipelines:
        if no_goodput(goodput.get(p.pk, [])):
            out.append(
                Alert(
                    key=f"no_goodput:{p.pk}",
                    name="TandemPipelineNoGoodput",
                    severity="page",
                    summary=f"{p.name} delivers no tokens while requests wait",
                    pipeline_id=p.pk,
                )
            )
        for kind, field, slo_ms in (
            ("ITL", "itl_p99_ms", p.slo_itl_p99_ms),
            ("TTFT", "ttft_p99_ms", p.slo_ttft_p99_ms),
        ):
            p99 = slo_burning(slo.get(p.pk, []), field, slo_ms)
            if p99 is not None:
                out.append(
                    Alert(
                        key=f"{kind.lower()}_slo:{p.pk}",
                        name=f"Tandem{kind}SLOBurnFast",
                        severity="page",
                        summary=f"{p.name}: {kind} p99 {p99:g} ms, over its SLO of {slo_ms:g} ms",
                        pipeline_id=p.pk,
                    )
                )
    return out


def children_given_up(data_dir=None) -> list[Alert]:
    state = read_state(data_dir or settings.DATA_DIR) or {}
    return [
        Alert(
            key=f"child_given_up:{name}",
            name="TandemSupervisedChildGivenUp",
            severity="page",
            summary=f"manage.py up gave up restarting {name}",
        )
        for child in state.get("children", [])
        if child.get("state") == FAILED and (name := str(child.get("name", "")))
    ]
