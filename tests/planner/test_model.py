"""The planner's math: E formula, per-position acceptance, roofline, least-squares fit."""

import math

import pytest

from fleet.planner.model import (
    Curve,
    Hardware,
    ModelSpec,
    PipelineModel,
    alpha_from_per_position,
    cost_per_million_tokens,
    expected_tokens,
    fit_linear,
    predict,
    roofline_step_s,
    speedup,
)

H100 = Hardware("h100-sxm", 3350, 989.5, 700, 70, usd_per_hour=2.99)
CORSAIR = Hardware("d-matrix-corsair", 150000, 2400, 600, 60, kind="sram-accelerator")
LLAMA_8B = ModelSpec("8b", 8e9, n_layers=32, kv_dim=1024, context=1024)
LLAMA_1B = ModelSpec("1b", 1e9, n_layers=16, kv_dim=512, context=1024)


@pytest.mark.parametrize("alpha,k", [(0.6, 1), (0.8, 4), (0.9, 7), (0.0, 3)])
def test_expected_tokens_closed_form(alpha, k):
    assert expected_tokens(k, alpha) == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha))
    assert expected_tokens(k, alpha) == pytest.approx(sum(alpha**i for i in range(k + 1)))


def test_expected_tokens_edges():
    assert expected_tokens(0, 0.9) == 1.0
    assert expected_tokens(5, 1.0) == 6.0


def test_per_position_acceptance():
    # cumulative acceptance of positions 0..2 measured; position 3 extrapolated by the ratio
    per_pos = [0.8, 0.6, 0.45]
    assert expected_tokens(3, per_position=per_pos) == pytest.approx(1 + 0.8 + 0.6 + 0.45)
    assert expected_tokens(4, per_position=per_pos) == pytest.approx(
        1 + 0.8 + 0.6 + 0.45 + 0.45 * 0.75
    )
    # geometric positions give back the scalar formula and alpha
    geo = [0.7**i for i in range(1, 6)]
    assert expected_tokens(5, per_position=geo) == pytest.approx(expected_tokens(5, 0.7))
    assert alpha_from_per_position(geo) == pytest.approx(0.7, rel=0.02)


def test_speedup():
    assert speedup(0.8, 4, 0.05) == pytest.approx(expected_tokens(4, 0.8) / 1.2)


def test_roofline_decode_is_memory_bound_at_small_batch():
    t = roofline_step_s(H100, LLAMA_8B, batch=1, tokens=1)
    weights = 8e9 * 2 / (3350e9 * 0.8)
    assert t >= weights
    assert t == pytest.approx(
        weights + 2 * 32 * 1024 * 2 * 1024 / (3350e9 * 0.8) + H100.step_overhead_s, rel=1e-6
    )


def test_roofline_becomes_compute_bound_with_many_tokens():
    tokens = 4096
    t = roofline_step_s(H100, LLAMA_8B, batch=512, tokens=tokens)
    compute = 2 * 8e9 * tokens / (989.5e12 * 0.6)
    assert t >= compute
    # doubling the tokens scored roughly doubles a compute-bound step
    assert roofline_step_s(H100, LLAMA_8B, batch=512, tokens=2 * tokens) > 1.7 * t


def test_fit_linear_recovers_a_line():
    pts = [(n, 0.003 + 0.0002 * n) for n in (1, 4, 16, 64)]
    c = fit_linear(pts)
    assert c.a == pytest.approx(0.003) and c.x == pytest.approx(0.0002)
    assert c(10) == pytest.approx(0.005)


def test_fit_linear_noise_and_degenerate_cases():
    c = fit_linear([(1, 0.010), (1, 0.012)])  # one batch size: a constant
    assert c.a == pytest.approx(0.011) and c.x == 0
    c = fit_linear([(1, 0.01), (8, 0.005)])  # decreasing: no negative slope
    assert c.x == 0
    c = fit_linear([(10, 0.1), (20, 0.3)])  # negative intercept: refit through the origin
    assert c.a == 0 and c.x > 0
    with pytest.raises(ValueError):
        fit_linear([])


def test_predict_goodput_itl_and_energy():
    m = PipelineModel(
        alpha=0.8,
        verify_curve=Curve(0.02, 0.0001),
        draft_curve=Curve(0.002, 0.00001),
        verifier=H100,
        drafter=CORSAIR,
        n_verifiers=2,
        n_drafters=1,
    )
    p = predict(m, k=4, batch=8)
    t_d = 0.002 + 0.00001 * 16  # drafter serves 8 * 2 / 1 sequences
    t_v = 0.02 + 0.0001 * 8 * 5
    round_s = 4 * t_d + t_v
    E = expected_tokens(4, 0.8)
    assert p.round_s == pytest.approx(round_s)
    assert p.goodput_tps == pytest.approx(2 * 8 * E / round_s)
    assert p.itl_s == pytest.approx(round_s / E)
    power = 2 * (70 + 630 * t_v / round_s) + 1 * (60 + 540 * min(4 * t_d * 2 / round_s, 1))
    assert p.power_w == pytest.approx(power)
    assert p.tokens_per_j == pytest.approx(p.goodput_tps / power)


def test_k0_is_plain_decoding():
    m = PipelineModel(
        alpha=0.9,
        verify_curve=Curve(0.02, 0.0),
        draft_curve=Curve(0.001, 0),
        n_verifiers=1,
        n_drafters=1,
    )
    p = predict(m, k=0, batch=4)
    assert p.expected_tokens == 1 and p.round_s == pytest.approx(0.02)
    assert p.goodput_tps == pytest.approx(4 / 0.02)


def test_roofline_prediction_without_measurements():
    m = PipelineModel(alpha=0.7, verifier=H100, drafter=CORSAIR, target=LLAMA_8B, draft=LLAMA_1B)
    p = predict(m, k=4, batch=1)
    assert p.sources == {"verify": "roofline", "draft": "roofline", "alpha": "scalar"}
    assert 0 < p.goodput_tps < 1000 and math.isfinite(p.tokens_per_j)


def test_cost_per_million_tokens():
    assert cost_per_million_tokens(1000.0, 3.6) == pytest.approx(1.0)
    assert cost_per_million_tokens(0.0, 3.6) is None
    assert cost_per_million_tokens(10.0, None) is None


def test_fit_linear2_recovers_tokens_and_batch_terms():
    from fleet.planner.model import fit_linear2

    pts = [(n, b, 0.005 + 0.0003 * n + 0.0002 * b) for b in (1, 4, 16) for n in (b, 2 * b, 5 * b)]
    c = fit_linear2(pts)
    assert (c.a, c.x, c.y) == pytest.approx((0.005, 0.0003, 0.0002), rel=1e-6)
    assert c(10, 4) == pytest.approx(0.005 + 0.003 + 0.0008)
    # a negative batch term is dropped rather than predicting time that falls with batch
    bad = fit_linear2([(n, b, 0.01 + 0.001 * n - 0.0001 * b) for b in (1, 8) for n in (b, 3 * b)])
    assert bad.y >= 0 and bad.x >= 0 and bad.a >= 0
