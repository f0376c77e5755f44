"""The k adaptive drafting chose, by batch size, travels in the drafter's telemetry (k_hist)
and comes out of the aggregation as the pipeline's mean k and k by batch (its chart)."""

from __future__ import annotations

import pytest

from fleet.telemetry.accumulators import Acc, derive
from fleet.telemetry.samples import InvalidSample, normalize


def test_k_hist_is_validated_and_derived():
    s = normalize({"ts": 1.0, "role": "draft", "k_hist": {"8:4": 30, "8:0": 10, "1:6": 5}})
    acc = Acc()
    acc.add_sample(s)
    figures = derive(acc, 1.0)
    assert figures["k_mean"] == pytest.approx((8 * 0 + 4 * 30 + 6 * 5) / 45, abs=1e-3)
    assert figures["k_by_batch"] == {"1": 6.0, "8": 3.0}
    acc.add_sample(s, sign=-1)
    assert derive(acc, 1.0)["k_mean"] is None


@pytest.mark.parametrize(
    "bad", [{"x:4": 1}, {"8:99": 1}, {"8:4": -1}, {"8:4": 1.5}, {"0:4": 1}, "nope"]
)
def test_bad_k_hist_is_refused(bad):
    with pytest.raises(InvalidSample):
        normalize({"ts": 1.0, "role": "draft", "k_hist": bad})


def test_k_by_batch_band_is_a_chart_series():
    """k by batch size over time: each band is a figure of its own in the live window and the
    rollups (the pipeline page's k chart draws one line a band)."""
    from fleet.telemetry.rollups import SERIES_FIELDS

    s = normalize(
        {"ts": 1.0, "role": "draft", "k_hist": {"1:6": 5, "3:4": 10, "4:2": 10, "40:0": 2}}
    )
    acc = Acc()
    acc.add_sample(s)
    figures = derive(acc, 1.0)
    assert figures["k_batch_1"] == 6.0
    assert figures["k_batch_4"] == 3.0  # batches 2-4
    assert figures["k_batch_16"] is None  # no round of 5-16 sequences
    assert figures["k_batch_64"] == 0.0
    assert {"k_batch_1", "k_batch_4", "k_batch_16", "k_batch_64", "k_batch_4096"} <= set(
        SERIES_FIELDS
    )


def test_acceptance_per_position_asked_counts_the_rounds_without_a_proposal():
    """One round of 8 sequences asked for 2 tokens; the drafter (an n-gram table) proposed
    for 2 of them, both accepted at position 0, one at position 1. vLLM's per-position
    acceptance says 1.0 and 0.5; per sequence-round asked it is 2/8 and 1/8, what the goodput
    model must price (k 4 on smollm2 at α 0.34 lost to plain decoding)."""
    acc = Acc()
    acc.per_pos, acc.per_pos_drafts, acc.drafts = [2.0, 1.0], [2.0, 2.0], 2.0
    acc.k_hist = {"8:2": 1.0, "8:0": 3.0}  # rounds at k = 0 ask for nothing
    figures = derive(acc, 1.0)
    assert figures["per_position_acceptance"] == [1.0, 0.5]
    assert figures["per_position_asked"] == [0.25, 0.125]
    acc.k_hist = {}  # a verifier's own window: no drafter rounds to count
    assert derive(acc, 1.0)["per_position_asked"] == []
