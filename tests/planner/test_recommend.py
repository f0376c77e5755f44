"""Recommendations choose k by predicted goodput, not by acceptance."""

import pytest

from fleet.planner.model import Curve, PipelineModel, expected_tokens, predict
from fleet.planner.recommend import (
    batch_grid,
    best_k_at,
    best_split,
    k_table,
    policy_from_table,
    predict_policy,
)

# A verifier that turns compute-bound: each scored token costs 0.2 ms beyond 5 ms.
M = PipelineModel(
    alpha=0.8,
    verify_curve=Curve(0.005, 0.0002),
    draft_curve=Curve(0.0005, 0.00001),
    n_verifiers=1,
    n_drafters=1,
)


def test_best_k_is_goodput_max_not_acceptance_max():
    for batch in (1, 8, 64):
        best = best_k_at(M, batch)
        goodputs = {k: predict(M, k=k, batch=batch).goodput_tps for k in range(9)}
        assert best.k == max(goodputs, key=goodputs.__getitem__)
    # acceptance (E) always grows with k, but goodput does not at large batch
    assert expected_tokens(8, 0.8) > expected_tokens(1, 0.8)
    assert best_k_at(M, 1).k > best_k_at(M, 64).k


def test_k_table_falls_with_batch_size():
    table = k_table(M, 64)
    ks = [k for _, k in table]
    assert ks == sorted(ks, reverse=True) and len(table) >= 2
    assert table[-1][0] == 64
    policy = policy_from_table(table)
    assert policy["mode"] == "table"
    assert predict_policy(M, policy, 64).k == best_k_at(M, 64).k


def test_itl_slo_limits_k():
    free = best_k_at(M, 1)
    slo_ms = free.round_s * 1000 * 0.8
    constrained = best_k_at(M, 1, itl_slo_ms=slo_ms)
    assert constrained.k < free.k and constrained.round_s * 1000 <= slo_ms


def test_batch_grid():
    assert batch_grid(32) == [1, 2, 4, 8, 16, 32]
    assert batch_grid(24) == [1, 2, 4, 8, 16, 24]
    assert batch_grid(1) == [1]


def test_best_split_respects_power_budget():
    from fleet.planner.model import Hardware

    gpu = Hardware("g", 3000, 900, 700, 70)
    m = PipelineModel(
        alpha=0.8,
        verify_curve=Curve(0.02, 0.0001),
        draft_curve=Curve(0.01, 0.0005),
        verifier=gpu,
        drafter=gpu,
        n_verifiers=2,
        n_drafters=2,
    )
    best, splits = best_split(m, batch=16, flexible_drafters=2, flexible_verifiers=2)
    assert max(s.prediction.goodput_tps for s in splits) == pytest.approx(
        best.prediction.goodput_tps
    )
    budget = min(s.prediction.power_w for s in splits) + 1
    capped, _ = best_split(
        m, batch=16, flexible_drafters=2, flexible_verifiers=2, power_budget_w=budget
    )
    assert capped.within_budget and capped.prediction.power_w <= budget
