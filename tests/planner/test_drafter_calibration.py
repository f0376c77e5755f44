"""The planner prices a real pipeline with what its drafter's rounds realized: adaptive k's
calibration by (batch bucket, k), published in the drafter's inspection record beside its
costs. bench_control on smollm2 at 8 streams: the model priced plain decoding at 90 tokens/s
where it measured 102, the worker's calibration corrected that, and the planner, without it,
stayed 18-24 % off at its recommended k."""

from __future__ import annotations

import json

import pytest

from fleet import redis_clients
from fleet.planner import measurements
from fleet.planner.model import round_of
from fleet.planner.node_costs import calibration_from_json
from inference import wire
from tests.factories import make_node, make_pipeline, place

DRAFT_COSTS = [[8, k, 0.001 * k, 10] for k in (1, 2, 4)]


def _publish(node_id: int, calibration) -> None:
    record = {"adaptive": {"draft_costs": DRAFT_COSTS, "calibration": calibration}}
    redis_clients.client().set(wire.inspect_key(node_id), json.dumps(record))


@pytest.mark.django_db
def test_the_planner_prices_a_pipeline_with_its_drafters_calibration():
    pipeline = make_pipeline()
    (verifier, _), (drafter, _) = make_node(roles=("verify",)), make_node(roles=("draft",))
    place(pipeline, verifier, "verify")
    place(pipeline, drafter, "draft")
    try:
        _publish(drafter.pk, None)
        plain = measurements.pipeline_model(pipeline)
        assert plain.calibration is None
        assert measurements.sources_label(plain)["calibration"] == "none"
        _publish(drafter.pk, {"8/0": 1.13, "8/2": 0.8, "1/4": "junk", "8/x": 1.0, "8/3": 9.0})
        m = measurements.pipeline_model(pipeline)
    finally:
        redis_clients.client().delete(wire.inspect_key(drafter.pk))
    assert m.calibration == {(8, 0): 1.13, (8, 2): 0.8}
    assert "measured by the drafter" in measurements.sources_label(m)["calibration"]
    for k, factor in ((0, 1.13), (2, 0.8), (4, 1.0)):  # k 4: not measured, the model's word
        raw = round_of(plain, k=k, batch=8).goodput_tps
        assert round_of(m, k=k, batch=8).goodput_tps == pytest.approx(raw * factor)


def test_a_published_calibration_that_does_not_parse_is_left_out():
    assert calibration_from_json(["8/0", 1.0]) == {}
    assert calibration_from_json({"8/0": None, "0/1": 1.0, "8/-1": 1.0, "4/2": 0.5}) == {
        (4, 2): 0.5
    }
