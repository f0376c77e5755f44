"""Read queries of the data plane: generations, outstanding work per node, node inspection."""

from __future__ import annotations

import json

from django.db.models import Count, Q, QuerySet

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
    from inference.wire import _client

    raw = _client().get(inspect_key(node_id))
    return json.loads(raw) if raw else None


def inspect_key(node_id: int) -> str:
    return f"tandem:node:{node_id}:inspect"
