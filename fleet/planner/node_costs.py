"""The step costs the pipeline's own workers measured (their start-up sweep and live rounds,
`inference.worker.cost_sweep`), as the planner reads them: from each node's inspection record
in Redis. A real pipeline's planner then predicts any k and batch from measured costs, not
from a roofline of a CPU it knows only by name."""

from __future__ import annotations

import json
import logging

from fleet import redis_clients
from fleet.planner.costs import StepCosts
from inference import wire

logger = logging.getLogger(__name__)


def node_step_costs(verifiers: list[int], drafters: list[int]) -> dict:
    """{"verify_costs": StepCosts, "draft_costs": StepCosts} for what the nodes published
    (each key only when some node did); {} when Redis cannot be read."""
    ids = [*verifiers[:8], *drafters[:8]]
    if not ids:
        return {}
    try:
        raw = redis_clients.client().mget([wire.inspect_key(i) for i in ids])
    except Exception as exc:  # the planner works without them (roofline, rollups)
        logger.warning("node step costs not read: %r", exc)
        return {}
    out: dict = {}
    for node_id, value in zip(ids, raw, strict=True):
        try:
            record = json.loads(value) if value else {}
        except (TypeError, ValueError):
            continue
        if node_id in verifiers and "verify_costs" not in out:
            costs = StepCosts.from_json(record.get("step_costs"))
            if len(costs):
                out["verify_costs"] = costs
        if node_id in drafters and "draft_costs" not in out:
            costs = StepCosts.from_json((record.get("adaptive") or {}).get("draft_costs"))
            if len(costs):
                out["draft_costs"] = costs
    return out
