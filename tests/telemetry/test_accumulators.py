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
    pos = [(drafts * 0.8 ** (i + 1), float(drafts)) for i in range(5)]
    assert estimate_alpha(pos) == pytest.approx(0.8)
    assert estimate_alpha([]) is None


def _k_sample(ts: float, *, k: int, alpha: float, drafts: int = 1000, width: int = 4) -> dict:
    """One second of a verifier drafting k tokens with geometric acceptance `alpha`, as the
    worker's agent reports it: its per-position lists keep the width of the largest k it ever
    ran (the engine's counters only grow), so positions >= k read 0."""
    accepted = [round(drafts * alpha ** (i + 1)) if i < k else 0 for i in range(width)]
    return normalize(
        verify_sample(
            ts=ts,
            num_drafts=drafts,
            num_draft_tokens=drafts * k,
            num_accepted_tokens=sum(accepted),
            num_accepted_tokens_per_pos=accepted,
            num_draft_tokens_per_pos=[drafts if i < k else 0 for i in range(width)],
            generation_tokens=drafts + sum(accepted),
        )
    )


def test_alpha_does_not_drop_when_k_is_lowered():
    """A live window at k=4 (alpha 0.80), then the window after k was lowered to 2 (alpha
    0.85): acceptance rises, so must alpha. Positions 2 and 3 no longer exist at k=2; they
    must not count as drafted-and-rejected."""
    acc = Acc()
    k4 = [_k_sample(t, k=4, alpha=0.80) for t in range(5)]
    for s in k4:
        acc.add_sample(s)
    before = derive(acc, 5.0)
    assert before["alpha"] == pytest.approx(0.80, abs=0.005)
    k2 = [_k_sample(5 + t, k=2, alpha=0.85) for t in range(5)]
    for old, new in zip(k4, k2, strict=True):  # the window slides from k=4 to k=2
        acc.add_sample(new)
        acc.add_sample(old, sign=-1)
        mixed = derive(acc, 5.0)
        assert mixed["alpha"] >= before["alpha"] - 0.005  # never walks down on the way
    after = derive(acc, 5.0)
    assert after["acceptance_rate"] > before["acceptance_rate"]
    assert after["alpha"] == pytest.approx(0.85, abs=0.005)
    assert after["alpha"] > before["alpha"]
    assert len(after["per_position_acceptance"]) == 2  # only the positions that existed
    assert after["per_position_acceptance"][0] == pytest.approx(0.85, abs=0.001)


def test_mixed_window_judges_each_position_by_the_drafts_that_had_it():
    acc = Acc()
    acc.add_sample(_k_sample(0, k=4, alpha=0.8, drafts=600))
    acc.add_sample(_k_sample(1, k=2, alpha=0.8, drafts=400))
    d = derive(acc, 2.0)
    assert d["alpha"] == pytest.approx(0.8, abs=0.005)
    assert d["per_position_acceptance"] == pytest.approx([0.8, 0.64, 0.512, 0.41], abs=0.002)


def test_samples_without_draft_counts_use_the_mean_draft_length():
    legacy = normalize(verify_sample(ts=1.0))  # 10 drafts, 40 draft tokens: k = 4
    assert legacy["num_draft_tokens_per_pos"] == [10, 10, 10, 10]
    short = normalize(
        verify_sample(ts=1.0, num_draft_tokens=20, num_accepted_tokens_per_pos=[8, 6, 0, 0])
    )
    assert short["num_draft_tokens_per_pos"] == [10, 10]
    with pytest.raises(InvalidSample):  # accepted where no draft had the position
        normalize(verify_sample(ts=1.0, num_draft_tokens_per_pos=[10, 10]))


def test_window_subtracts_exactly_and_sources_mix():
    acc = Acc()
    v, d = normalize(verify_sample(ts=1.0)), normalize(draft_sample(ts=1.0))
    acc.add_sample(v)
    acc.add_sample(d)
    assert derive(acc, 1.0)["power_source"] == "mixed"
    acc.add_sample(v, sign=-1)
    out = derive(acc, 1.0)
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
