"""The aggregator's fast path for sample bodies accepts exactly what `normalize()` would
return unchanged; the templated publisher signs exactly what `encode()` signs."""

import json
import random

import pytest

from fleet.telemetry import benchload
from fleet.telemetry.canonical import is_canonical, load
from fleet.telemetry.ingest import encode, pack
from fleet.telemetry.samples import InvalidSample, normalize
from fleet.telemetry.templates import Templates
from tests.telemetry import factories as f


def _canonical(sample: dict) -> dict:
    return json.loads(json.dumps(normalize(sample), sort_keys=True))


@pytest.mark.parametrize(
    "sample", [f.verify_sample(ts=1000.0), f.draft_sample(ts=1000.0), {"ts": 5.0}]
)
def test_canonical_bodies_take_the_fast_path_unchanged(sample):
    body = _canonical(sample)
    assert is_canonical(body)
    assert load(json.dumps(body)) == normalize(sample)


BREAKS = [
    ("ts", float("nan")),
    ("ts", "1000"),
    ("interval_s", 0.0),
    ("interval_s", 4000.0),
    ("role", "boss"),
    ("pipeline", True),
    ("simulated", 1),
    ("num_drafts", -1),
    ("num_drafts", 1.5),
    ("num_drafts", True),
    ("power_w", float("inf")),
    ("power_w", -1.0),
    ("power_w", 3),  # an int where normalize() writes a float: not canonical, re-normalized
    ("utilization", 1.5),
    ("num_accepted_tokens_per_pos", [99, 0, 0, 0]),  # more accepted than drafted
    ("num_accepted_tokens_per_pos", [1] * 40),
    ("ttft_hist", [0] * 3),
    ("ttft_hist", [-1] + [0] * 18),
    ("verify_batch_hist", {"08": 10}),
    ("verify_batch_hist", {"8": 0}),
    ("verify_batch_hist", {"5000": 1}),
    ("verify_batch_hist", {"²": 1}),
    ("energy_j", {"draft": 1.0}),
    ("energy_j", {"draft": 1.0, "verify": -2.0}),
    ("power_source", "guessed"),
    ("extra", 1),
]


@pytest.mark.parametrize(("key", "value"), BREAKS)
def test_anything_else_goes_through_normalize(key, value):
    body = _canonical(f.verify_sample(ts=1000.0))
    body[key] = value
    assert not is_canonical(body)
    try:
        expected = normalize(body)
    except (InvalidSample, ValueError, TypeError):
        with pytest.raises((InvalidSample, ValueError, TypeError)):
            load(json.dumps(body))
    else:  # normalize() repairs it: load() returns the repaired sample, never the raw one
        assert load(json.dumps(body)) == expected


def test_templated_entries_are_what_encode_signs():
    rng = random.Random(3)
    shapes = Templates()
    for role in ("verify", "draft"):
        sample = benchload.sample(role, rng, 0.0)
        shapes.shape(role, sample)
        for ts in (1_700_000_000.123, 1_700_000_001.0):
            got = shapes.entry(42, "k" * 64, role, ts)
            assert got == pack(encode(42, {**sample, "ts": ts}, key="k" * 64))
