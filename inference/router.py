"""The router: assigns a generation to one drafter and one verifier of its pipeline.

Least outstanding work among healthy placed nodes (online, not lost by heartbeat age);
ties go to the lowest id. Sticky: the pair is written on the generation and never changes
while the sequence lives there (both nodes hold its KV cache) -- only a re-route after a
node loss assigns a new pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F, Func, IntegerField, OuterRef, Q, Subquery
from django.utils import timezone

from fleet.nodes.choices import SERVING_STATES
from fleet.nodes.models import Node
from fleet.pipelines.models import DrafterKind, Pipeline, PlacementRole
from inference.models import Generation
from inference.selectors import ACTIVE_STATES


class NoCapacity(Exception):
    """No healthy drafter or verifier is placed in the pipeline."""


@dataclass(frozen=True)
class Pair:
    drafter: Node | None  # None when the pipeline decodes without a drafter
    verifier: Node


def needs_drafter(pipeline: Pipeline) -> bool:
    return pipeline.drafter_kind != DrafterKind.NONE


def _load(pipeline: Pipeline, *, exclude: set[int]) -> list[Node]:
    """The healthy placed nodes of the pipeline, each with its role (`role`) and its active
    generations as drafter or verifier (`load`): ONE query (a correlated count)."""
    now = timezone.now()
    active = (
        Generation.objects.filter(state__in=ACTIVE_STATES)
        .filter(Q(drafter=OuterRef("pk")) | Q(verifier=OuterRef("pk")))
        .order_by()
        .annotate(n=Func(F("id"), function="COUNT", output_field=IntegerField()))
        .values("n")
    )
    return list(
        Node.objects.filter(
            placement__pipeline=pipeline,
            state__in=SERVING_STATES,
            last_seen__gte=now - Node.liveness_window(),
        )
        .exclude(pk__in=exclude)
        .only("id", "name", "state", "last_seen")
        .annotate(role=F("placement__role"), load=Subquery(active, output_field=IntegerField()))
    )


def pick_pair(pipeline: Pipeline, *, exclude: set[int] = frozenset()) -> Pair:
    nodes = _load(pipeline, exclude=exclude)
    role = {n.pk: n.role for n in nodes}  # type: ignore[attr-defined]  # annotated by _load
    verifiers = [n for n in nodes if role[n.pk] == PlacementRole.VERIFY]
    drafters = [n for n in nodes if role[n.pk] == PlacementRole.DRAFT and needs_drafter(pipeline)]
    if not verifiers:
        raise NoCapacity(f"pipeline {pipeline.name!r} has no healthy verifier")
    if needs_drafter(pipeline) and not drafters:
        raise NoCapacity(f"pipeline {pipeline.name!r} has no healthy drafter")

    def least(nodes):
        return min(nodes, key=lambda n: (n.load or 0, n.pk)) if nodes else None

    return Pair(drafter=least(drafters), verifier=least(verifiers))
