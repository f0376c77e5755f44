"""Read queries of the live pages: DB rows merged with the aggregator's snapshot."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from fleet.audit.diff import describe_change
from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline
from fleet.telemetry import feed, fig_order, snapshot

FLEET_FIRST_ROWS = 50  # rows the fleet page renders on the server; its script loads the rest
# The fleet table's columns: (sort key, header, class). Every one sorts (static/js/fleet_sort.js);
# the live figures' keys are fig_order.SORT_FIGS.
FLEET_COLUMNS = (
    ("name", "Node", ""),
    ("state", "State", ""),
    ("role", "Role", ""),
    ("pipeline", "Pipeline", ""),
    ("power", "Power", "num"),
    ("util", "Utilization", ""),
    ("batch", "Batch", "num"),
    ("tps", "Tokens/s", "num"),
    ("acc", "Accept.", "num"),
    ("seen", "Last sample", "num"),
)


def fleet_context(filters: dict | None = None, *, sort: str = "name", desc: bool = False) -> dict:
    """The fleet page's first render: the headline figures, the node counts and the first
    FLEET_FIRST_ROWS rows that pass `filters`, never the whole fleet (10,000 rows took ~3 s to
    render): the page's script gets every row from the websocket's snapshot. The rows are in
    the order the script will show: by name, or by a live figure (`fig_order`); a sort by
    state, role or pipeline is the script's alone (the first rows are by name until then)."""
    filters = filters or {}
    nodes_qs = Node.objects.not_retired()
    total = nodes_qs.count()
    matching = _filtered(nodes_qs, filters)
    shown = matching.count() if filters else total
    related = matching.select_related("profile", "placement", "placement__pipeline")
    by_figure = sort in fig_order.SORT_FIGS
    if not by_figure and sort != "name":
        sort, desc = "name", False
    values = feed.read_column(sort) if by_figure else {}
    if values:
        candidates = matching.values_list("id", "name", "placement__role")
        ids = fig_order.first(candidates, values, sort, descending=desc, n=FLEET_FIRST_ROWS)
        by_id = related.in_bulk(ids)
        nodes = [by_id[i] for i in ids if i in by_id]
    else:  # by name (no node has the live figure yet: they tie, and ties go by name)
        by = ("-name", "-id") if desc and sort == "name" else ("name", "id")
        nodes = list(related.order_by(*by)[:FLEET_FIRST_ROWS])
    fields = ["fleet", *(f"n:{n.pk}" for n in nodes)]
    fleet, *live = snapshot.read_fields(*fields)
    rows = []
    for node, entry in zip(nodes, live, strict=True):
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
        "sort": {"key": sort, "aria": "descending" if desc else "ascending"},
        "columns": FLEET_COLUMNS,
        "node_count": total,
        "shown_count": shown,
        "fleet": fleet,
        "pipelines": Pipeline.objects.only("id", "name").order_by("name"),
    }


def _filtered(qs, filters: dict):
    if filters.get("q"):
        qs = qs.filter(name__icontains=filters["q"])
    if filters.get("state"):
        qs = qs.filter(state=filters["state"])
    role = filters.get("role")
    if role == "none":
        qs = qs.filter(placement__isnull=True)
    elif role:
        qs = qs.filter(placement__role=role)
    pipeline = filters.get("pipeline")
    if pipeline:
        qs = qs.filter(placement__pipeline_id=int(pipeline)) if pipeline.isdigit() else qs.none()
    if filters.get("sim") in ("sim", "real"):
        qs = qs.filter(simulated=filters["sim"] == "sim")
    return qs


def generations_of(node: Node):
    from inference.models import Generation  # a model module only: no torch

    return (
        Generation.objects.filter(Q(drafter=node) | Q(verifier=node))
        .select_related("pipeline")
        .order_by("-created_at")
    )


def recent_generations(pipeline: Pipeline, n: int = 20) -> list:
    """A pipeline's latest generations (for the page's links to their timelines): no text,
    no round log read."""
    from inference.models import Generation

    return list(
        Generation.objects.filter(pipeline=pipeline)
        .defer("prompt", "output_text", "prompt_tokens", "rounds")
        .order_by("-created_at")[:n]
    )


# --- chart history: time ranges, request/error rates, change markers ------------------------

# The time ranges a live chart offers -> minutes of history (read from the rollups).
RANGES = {"5m": 5, "1h": 60, "6h": 360, "24h": 1440}
# Bucket of the request/error rates per range (seconds): about 30..300 points each.
RATE_BUCKET_S = {"5m": 10, "1h": 60, "6h": 300, "24h": 900}
MAX_MARKERS = 200


PARTS = ("series", "rates", "markers", "slo")


def history(scope: str, obj, range_key: str, parts=PARTS) -> dict:
    """Everything a live chart needs for one time range: the rollup series, request and error
    rates from the generation records, the configuration changes from the audit log and the
    pipeline's SLOs (or only the `parts` asked for). `obj` is the Pipeline or Node (None for
    the fleet)."""
    from fleet.telemetry import rollups

    minutes = RANGES[range_key]
    since = timezone.now() - timedelta(minutes=minutes)
    scope_id = obj.pk if obj is not None else 0
    out: dict = {"range": range_key, "since": since.timestamp()}
    if "series" in parts:
        out["series"] = rollups.series(scope, scope_id, minutes=minutes)
    if "rates" in parts:
        out["rates"] = request_rates(scope, obj, since=since, bucket_s=RATE_BUCKET_S[range_key])
    if "markers" in parts:
        out["markers"] = change_markers(scope, obj, since=since)
    if "slo" in parts:
        out["slo"] = slo_of(scope, obj)
    return out


def slo_of(scope: str, obj) -> dict:
    pipeline = obj if scope == "pipeline" else None
    if scope == "node" and obj is not None and _has_placement(obj):
        pipeline = obj.placement.pipeline
    if pipeline is None:
        return {"itl_p99_ms": None, "ttft_p99_ms": None}
    return {"itl_p99_ms": pipeline.slo_itl_p99_ms, "ttft_p99_ms": pipeline.slo_ttft_p99_ms}


def _has_placement(node: Node) -> bool:
    try:
        return node.placement is not None
    except Node.placement.RelatedObjectDoesNotExist:
        return False


def request_rates(scope: str, obj, *, since, bucket_s: int) -> dict:
    """Finished requests per second and the share that failed, per bucket, counted from the
    generation records (the serving path writes one row per request). Grouped in the
    database by second or minute, so the rows read stay bounded whatever the traffic."""
    from django.db.models import Count
    from django.db.models.functions import TruncMinute, TruncSecond

    from inference.models import Generation, GenerationState

    qs = Generation.objects.filter(finished_at__gte=since)
    if scope == "pipeline":
        qs = qs.filter(pipeline=obj)
    elif scope == "node":
        qs = qs.filter(Q(drafter=obj) | Q(verifier=obj))
    trunc = TruncSecond if bucket_s < 60 else TruncMinute
    grouped = (
        qs.annotate(at=trunc("finished_at"))
        .values("at", "state")
        .annotate(n=Count("id"))
        .order_by()
    )
    start = int(since.timestamp()) // bucket_s * bucket_s
    end = int(timezone.now().timestamp())
    done: dict[int, int] = {}
    failed: dict[int, int] = {}
    for row in grouped:
        bucket = int(row["at"].timestamp()) // bucket_s * bucket_s
        done[bucket] = done.get(bucket, 0) + row["n"]
        if row["state"] == GenerationState.FAILED:
            failed[bucket] = failed.get(bucket, 0) + row["n"]
    out: dict[str, list] = {"t": [], "requests_per_s": [], "error_rate": []}
    for bucket in range(start, end - bucket_s + 1, bucket_s):  # whole buckets only
        n = done.get(bucket, 0)
        out["t"].append(bucket + bucket_s)  # a point sits at the end of its bucket
        out["requests_per_s"].append(round(n / bucket_s, 3))
        out["error_rate"].append(round(failed.get(bucket, 0) / n, 4) if n else None)
    return out


def change_markers(scope: str, obj, *, since) -> list[dict]:
    """Configuration changes since `since` from the audit log, oldest first: when, who, what."""
    from fleet.audit.models import AuditEvent

    qs = AuditEvent.objects.filter(created_at__gte=since)
    if scope == "pipeline":
        qs = qs.filter(pipeline=obj)
    elif scope == "node":
        mine = Q(node=obj)
        if _has_placement(obj):  # and the changes of the pipeline it serves
            mine |= Q(pipeline_id=obj.placement.pipeline_id, node__isnull=True)
        qs = qs.filter(mine)
    else:
        qs = qs.filter(Q(pipeline__isnull=False) | Q(node__isnull=False))
    events = list(qs.select_related("node").order_by("-created_at", "-id")[:MAX_MARKERS])
    markers: list[dict] = []
    for e in reversed(events):
        node = e.node.name if e.node is not None else None
        marker = {
            "ts": e.created_at.timestamp(),
            "actor": e.actor_label,
            "action": e.action,
            "text": describe_change(e.action, e.before, e.after, node=node),
        }
        if markers and markers[-1] == marker:  # one move, audited on both its pipelines
            continue
        markers.append(marker)
    return markers
