"""The router: assigns a generation to one drafter and one verifier of its pipeline.

Least outstanding work among healthy placed nodes (online, not lost by heartbeat age);
ties go to the lowest id. Sticky: the pair is written on the generation and never changes
while the sequence lives there (both nodes hold its KV cache) -- only a re-route after a
node loss assigns a new pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from fleet.nodes.choices import SERVING_STATES
from fleet.nodes.models import Node
from fleet.pipelines.models import DrafterKind, Pipeline, PlacementRole
from inference.selectors import outstanding_by_node


class NoCapacity(Exception):
    """No healthy drafter or verifier is placed in the pipeline."""


@dataclass(frozen=True)
class Pair:
    drafter: Node | None  # None when the pipeline decodes without a drafter
    verifier: Node


def needs_drafter(pipeline: Pipeline) -> bool:
    return pipeline.drafter_kind != DrafterKind.NONE


def healthy_nodes(pipeline: Pipeline, role: str, *, exclude: set[int] = frozenset()):
    now = timezone.now()
    nodes = Node.objects.filter(
        placement__pipeline=pipeline, placement__role=role, state__in=SERVING_STATES
    ).exclude(pk__in=exclude)
    return [n for n in nodes if n.last_seen is not None and not n.is_lost(now)]


def pick_pair(pipeline: Pipeline, *, exclude: set[int] = frozenset()) -> Pair:
    verifiers = healthy_nodes(pipeline, PlacementRole.VERIFY, exclude=exclude)
    drafters = (
        healthy_nodes(pipeline, PlacementRole.DRAFT, exclude=exclude)
        if needs_drafter(pipeline)
        else []
    )
    if not verifiers:
        raise NoCapacity(f"pipeline {pipeline.name!r} has no healthy verifier")
    if needs_drafter(pipeline) and not drafters:
        raise NoCapacity(f"pipeline {pipeline.name!r} has no healthy drafter")
    load = outstanding_by_node([n.pk for n in verifiers + drafters])

    def least(nodes):
        return min(nodes, key=lambda n: (load.get(n.pk, 0), n.pk)) if nodes else None

    return Pair(drafter=least(drafters), verifier=least(verifiers))
