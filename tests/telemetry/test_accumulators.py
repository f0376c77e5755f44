"""The arithmetic of the live figures (no Django, no Redis)."""

import pytest

from fleet.telemetry.accumulators import Acc, derive, estimate_alpha, quantile
from fleet.telemetry.samples import InvalidSample, normalize
from tests.telemetry.factories import draft_sample, verify_sample


def test_derive_one_verifier_second():
    acc = Acc()
    acc.add_sample(normalize(verify_sample(ts=1.0)))
    d = derive(acc, acc.dur)
    assert d["acceptance_rate"] == pytest.approx(24 / 40)
    assert d["mean_acceptance_length"] == pytest.approx(1 + 24 / 10)
    assert d["per_position_acceptance"] == [0.8, 0.7, 0.5, 0.4]
    assert d["tokens_per_s"] == 34
    assert d["batch_mean"] == 8
    assert d["power_w"] == 300 and d["power_source"] == "measured"
    assert d["power_verify_w"] == 300 and d["power_draft_w"] == 0
    assert d["tokens_per_j"] == pytest.approx(34 / 300, abs=1e-4)
    assert 10 <= d["itl_p50_ms"] <= 30
    assert d["verify_step_ms"] == 20


def test_alpha_from_consecutive_positions():
    # geometric acceptance with alpha 0.8: position i accepted with 0.8**(i+1)
    drafts = 10_000
    per_pos = [drafts * 0.8 ** (i + 1) for i in range(5)]
    assert estimate_alpha(drafts, per_pos) == pytest.approx(0.8)
    assert estimate_alpha(0, []) is None


def test_window_subtracts_exactly_and_sources_mix():
    acc = Acc()
    v, d = normalize(verify_sample(ts=1.0)), normalize(draft_sample(ts=1.0))
    acc.add_sample(v)
    acc.add_sample(d)
    assert derive(acc, 1.0)["power_source"] == "mixed"
    acc.add_sample(v, sign=-1)
    out = derive(acc, acc.dur)
    assert out["power_source"] == "modeled"
    assert out["acceptance_rate"] is None and out["batch_hist"] == {}
    assert out["draft_step_ms"] == 4


def test_fleet_rates_sum_node_rates():
    a, b = Acc(), Acc()
    for t in range(5):  # a: 5 samples in its window
        a.add_sample(normalize(verify_sample(ts=t)))
    b.add_sample(normalize(draft_sample(ts=0)))  # b: 1 sample
    fleet = Acc()
    fleet.add_rates_of(a)
    fleet.add_rates_of(b)
    d = derive(fleet, 1.0)
    assert d["power_w"] == pytest.approx(400)
    assert d["power_draft_w"] == pytest.approx(100)
    assert d["tokens_per_s"] == pytest.approx(34)
    assert d["utilization"] == pytest.approx(0.65)
    assert d["tokens_per_j_draft"] == pytest.approx(0.34)


def test_quantile_interpolates():
    hist = [0] * 19
    hist[4] = 100  # all in (0.01, 0.02]
    assert quantile(hist, 0.5) == pytest.approx(0.015)
    assert quantile([0] * 19, 0.5) is None


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"ts": "now"},
        {"ts": 1, "num_drafts": -1},
        {"ts": 1, "power_source": "guessed"},
        {"ts": 1, "verify_batch_hist": {"x": 1}},
        {"ts": 1, "itl_hist": [1, 2]},
        {"ts": 1, "energy_j": {"gpu": 3}},
        {"ts": 1, "role": "boss"},
    ],
)
def test_normalize_rejects(bad):
    with pytest.raises(InvalidSample):
        normalize(bad)
