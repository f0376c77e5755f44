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
