"""TandemNodeLost (`tandem:fleet_nodes{state="lost"} > 0`, for 1m), one alert per placed node.

Tandem reads the nodes themselves rather than the fleet's count by state, so each alert names
and links its node and pipeline: a placed node marked lost, or whose heartbeat is older than
the liveness window (`Node.is_lost`), without waiting for the beat task that marks it. The
liveness window (heartbeat period x tolerance) stands in for the rule's `for: 1m`: Tandem
fires when the node goes quiet, Prometheus a minute after the mark."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from fleet.nodes.choices import TERMINAL_STATES, NodeState
from fleet.nodes.models import Node
from fleet.pipelines.models import Placement
from fleet.telemetry.alerts.base import Alert


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
