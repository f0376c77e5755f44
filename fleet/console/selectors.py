"""Read queries of the live pages: DB rows merged with the aggregator's snapshot."""

from __future__ import annotations

from django.db.models import Q

from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline
from fleet.telemetry import snapshot


def fleet_context() -> dict:
    nodes = list(
        Node.objects.not_retired()
        .select_related("profile", "placement", "placement__pipeline")
        .order_by("name")
    )
    fields = ["fleet", *(f"n:{n.pk}" for n in nodes)]
    fleet, *live = snapshot.read_fields(*fields) if nodes else [snapshot.read_fleet()]
    rows = []
    for node, entry in zip(nodes, live or [], strict=False):
        placement = getattr(node, "placement", None)
        row = (entry or {}).get("node") or {}
        rows.append(
            {
                "node": node,
                "role": placement.role if placement else row.get("role"),
                "pipeline": placement.pipeline if placement else None,
                "live": row,
            }
        )
    return {
        "rows": rows,
        "fleet": fleet,
        "pipelines": Pipeline.objects.only("id", "name"),
    }


def generations_of(node: Node):
    from inference.models import Generation  # a model module only: no torch

    return (
        Generation.objects.filter(Q(drafter=node) | Q(verifier=node))
        .select_related("pipeline")
        .order_by("-created_at")
    )
