"""Telemetry from one operating point (4 H100 verifiers, 4 Corsair drafters, alpha 0.55,
batch 26, k = 4, as in the report where the planner's k = 0 advice halved goodput) gives a
level, not a slope: the planner scales the roofline's shape to it (a line through one noisy
point takes its slope from noise), and its predictions at other k stay within 15 % of the
simulator's physics. (This guards the calibration; the report's +135 % itself is not
reproduced here -- the apply guard in test_apply_verification.py is what catches such a
miss in production.)"""

from __future__ import annotations

import random

import pytest

from fleet.planner import measurements
from fleet.planner.model import predict
from tests.factories import make_pipeline, online_node, place

pytestmark = pytest.mark.django_db


def test_one_operating_point_predicts_k0_within_15_percent():
    p = make_pipeline(name="sim-like", auto_bounds={"alpha_hint": 0.55})
    for i in range(4):
        place(p, online_node(name=f"h100-{i}"), "verify")
        place(
            p,
            online_node(name=f"corsair-{i}", profile="d-matrix-corsair", roles=("draft",)),
            "draft",
        )
    truth = measurements.pipeline_model(p, measured_inputs={"alpha": 0.55})
    batch, k = 26, 4
    at_k = predict(truth, k=k, batch=batch)
    rng = random.Random(0)
    rows = []
    for _ in range(60):  # an hour of 10 s buckets at one configuration, with sampling noise
        mal = at_k.expected_tokens * rng.uniform(0.8, 1.2)
        rate = (mal - 1) / k
        rows.append(
            {
                "alpha": 0.55,
                "batch_mean": batch * rng.uniform(0.97, 1.03),
                "acceptance_rate": rate,
                "mean_acceptance_length": mal,
                "verify_step_ms": truth.t_verify(batch, batch * (k + 1)) * 1000,
                "draft_step_ms": truth.t_draft(batch) * 1000,
                "tokens_per_s": at_k.goodput_tps,
            }
        )
    measured = measurements.measured_from_rollups(rows, default_k=k)
    planned = measurements.pipeline_model(p, measured_inputs=measured)
    for k_other in (0, 1, 2, 6, 8):
        real = predict(truth, k=k_other, batch=batch).goodput_tps
        predicted = predict(planned, k=k_other, batch=batch).goodput_tps
        assert abs(predicted - real) / real <= 0.15, (k_other, predicted, real)
    assert measurements.sources_label(planned)["verify_step"] == "calibrated roofline"


def test_simulated_verify_of_k_plus_1_costs_about_one_plain_step_on_a_gpu():
    """The simulator's step times are physics from the profile (bytes over bandwidth, FLOPs
    over peak, a launch floor): on a memory-bound H100, verifying 5 tokens per sequence at
    batch 8 costs about one plain step; on the CPU profile, compute shows sooner."""
    p = make_pipeline(name="physics")
    place(p, online_node(name="h100-v"), "verify")
    place(p, online_node(name="corsair-d", profile="d-matrix-corsair", roles=("draft",)), "draft")
    m = measurements.pipeline_model(p, measured_inputs={"alpha": 0.7})
    plain, verify5 = m.t_verify(8, 8), m.t_verify(8, 8 * 5)
    assert verify5 / plain <= 1.15
    assert m.t_verify(256, 256 * 9) / m.t_verify(256, 256) > 2  # compute-bound at large batch
