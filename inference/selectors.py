"""Read queries of the data plane: generations, outstanding work per node, node inspection."""

from __future__ import annotations

import json

from django.db.models import Count, Q, QuerySet

from fleet import redis_clients
from inference import wire
from inference.models import TERMINAL_STATES, Generation, GenerationState

ACTIVE_STATES = (GenerationState.QUEUED, GenerationState.RUNNING)


def generation_get(*, pk) -> Generation:
    return Generation.objects.select_related("pipeline", "drafter", "verifier").get(pk=pk)


def generations_active() -> QuerySet[Generation]:
    return Generation.objects.filter(state__in=ACTIVE_STATES)


def outstanding_by_node(node_ids: list[int]) -> dict[int, int]:
    """Active generations assigned to each node (as drafter or verifier), one query each."""
    counts = {node_id: 0 for node_id in node_ids}
    active = Q(state__in=ACTIVE_STATES)
    for field in ("drafter", "verifier"):
        rows = (
            Generation.objects.filter(active, **{f"{field}__in": node_ids})
            .values(field)
            .annotate(n=Count("id"))
        )
        for row in rows:
            counts[row[field]] += row["n"]
    return counts


def is_terminal_state(state: str) -> bool:
    return state in TERMINAL_STATES


def node_inspect(node_id: int) -> dict | None:
    """What a node worker last said it holds (KV slots in use, sequence ids), or None if
    no worker of that node has reported. Written by the worker at each change."""
    raw = redis_clients.client().get(wire.inspect_key(node_id))
    return json.loads(raw) if raw else None


def stream_owner(generation_id) -> int | None:
    """The verifier the ledger names for a generation: the node its stream lives under."""
    row = Generation.objects.filter(pk=generation_id).values_list("verifier_id").first()
    return row[0] if row else None


def stream_of(generation_id, *, last_id: str = "0") -> list[tuple[str, dict]]:
    """The generation's stream events (`wire.read_all`) under the verifier the ledger names."""
    return wire.read_all(generation_id, node=stream_owner(generation_id), last_id=last_id)
