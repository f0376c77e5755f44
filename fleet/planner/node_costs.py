"""The step costs the pipeline's own workers measured (their start-up sweep and live rounds,
`inference.worker.cost_sweep`), as the planner reads them: from each node's inspection record
in Redis. A real pipeline's planner then predicts any k and batch from measured costs, not
from a roofline of a CPU it knows only by name."""

from __future__ import annotations

import json
import logging

from fleet import redis_clients
from fleet.planner.adaptive import CALIBRATION_RANGE
from fleet.planner.costs import StepCosts
from inference import wire

logger = logging.getLogger(__name__)


def node_step_costs(verifiers: list[int], drafters: list[int]) -> dict:
    """{"verify_costs": StepCosts, "draft_costs": StepCosts, "calibration": {(bucket, k):
    factor}} for what the nodes published (each key only when some node did; the calibration
    is the drafter's adaptive k's); {} when Redis cannot be read."""
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
            adaptive = record.get("adaptive") or {}
            costs = StepCosts.from_json(adaptive.get("draft_costs"))
            if len(costs):
                out["draft_costs"] = costs
                calibration = calibration_from_json(adaptive.get("calibration"))
                if calibration:
                    out["calibration"] = calibration
    return out


def calibration_from_json(raw) -> dict[tuple[int, int], float]:
    """A drafter's published calibration ({"batch bucket/k": factor}) as the model takes it;
    what does not parse, or lies outside adaptive k's own clamp, is left out."""
    out: dict[tuple[int, int], float] = {}
    if not isinstance(raw, dict):
        return out
    low, high = CALIBRATION_RANGE
    for key, value in raw.items():
        try:
            b, k = (int(x) for x in str(key).split("/"))
            factor = float(value)
        except (TypeError, ValueError):
            continue
        if b >= 1 and k >= 0 and low <= factor <= high:
            out[(b, k)] = factor
    return out
