"""The router: assigns a generation to one drafter and one verifier of its pipeline.

Least outstanding work among healthy placed nodes (online, not lost by heartbeat age);
ties go to the lowest id. Sticky: the pair is written on the generation and never changes
while the sequence lives there (both nodes hold its KV cache) -- only a re-route after a
node loss assigns a new pair.

Degraded: a pipeline that drafts but has no healthy drafter left is served by a verifier
alone, by plain decoding (k=0), rather than refused: slower, the same output.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from django.db import connection
from django.utils import timezone

from fleet.nodes.choices import SERVING_STATES
from fleet.nodes.models import Node
from fleet.pipelines.models import DrafterKind, Pipeline, Placement, PlacementRole
from fleet.raw_models import raw_instances
from inference.models import Generation
from inference.selectors import ACTIVE_STATES


class NoCapacity(Exception):
    """No healthy drafter or verifier is placed in the pipeline."""


@dataclass(frozen=True)
class Pair:
    drafter: Node | None  # None when the pipeline decodes without a drafter
    verifier: Node
    degraded: bool = False  # the pipeline drafts, but no healthy drafter is left


def needs_drafter(pipeline: Pipeline) -> bool:
    return pipeline.drafter_kind != DrafterKind.NONE


def _load(pipeline: Pipeline, *, exclude: AbstractSet[int]) -> list[Node]:
    """The healthy placed nodes of the pipeline, each with its role (`role`) and its active
    generations as drafter or verifier (`n_active`): ONE query, a correlated count. Raw SQL: the
    ORM spent more CPU compiling this query than the database spent running it, on the path
    of every request."""
    node, placement = Node._meta.db_table, Placement._meta.db_table
    generation = Generation._meta.db_table
    serving, active = sorted(SERVING_STATES), list(ACTIVE_STATES)
    excluded = sorted(exclude)
    sql = (
        f"SELECT n.id, n.name, n.state, n.last_seen, p.role AS role, "
        f"(SELECT COUNT(*) FROM {generation} g WHERE g.state IN ({_marks(active)}) "
        f"AND (g.drafter_id = n.id OR g.verifier_id = n.id)) AS n_active "
        f"FROM {node} n JOIN {placement} p ON p.node_id = n.id "
        f"WHERE p.pipeline_id = %s AND n.state IN ({_marks(serving)}) AND n.last_seen >= %s"
        + (f" AND n.id NOT IN ({_marks(excluded)})" if excluded else "")
    )
    since = connection.ops.adapt_datetimefield_value(timezone.now() - Node.liveness_window())
    params = [*active, pipeline.pk, *serving, since, *excluded]
    return raw_instances(Node, sql, params)


def _marks(values: list) -> str:
    return ", ".join(["%s"] * len(values))


def pick_pair(pipeline: Pipeline, *, exclude: AbstractSet[int] = frozenset()) -> Pair:
    nodes = _load(pipeline, exclude=exclude)
    role = {n.pk: n.role for n in nodes}  # type: ignore[attr-defined]  # annotated by _load
    verifiers = [n for n in nodes if role[n.pk] == PlacementRole.VERIFY]
    drafters = [n for n in nodes if role[n.pk] == PlacementRole.DRAFT and needs_drafter(pipeline)]
    if not verifiers:
        raise NoCapacity(f"pipeline {pipeline.name!r} has no healthy verifier")

    def least(nodes):
        return min(nodes, key=lambda n: (n.n_active or 0, n.pk)) if nodes else None

    degraded = needs_drafter(pipeline) and not drafters
    return Pair(drafter=least(drafters), verifier=least(verifiers), degraded=degraded)
