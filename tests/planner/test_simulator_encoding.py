"""`manage.py simulate` publishes through the cheap signed path (issue 15): the entries it puts
on the streams are exactly `pack(encode(...))` of its samples, byte for byte, but what repeats
tick after tick (drafters', idle nodes' samples) is validated and serialised once."""

from __future__ import annotations

import pytest

from fleet.planner import simulator
from fleet.telemetry import ingest
from fleet.telemetry.ingest import encode, pack
from fleet.telemetry.templates import Encoder
from tests.telemetry import factories as f

pytestmark = pytest.mark.django_db


def test_the_simulator_publishes_what_encode_signs_through_templates(monkeypatch):
    alphas = simulator.setup_fleet(nodes=16, pipelines=2, alphas=(0.6, 0.8))
    sim = simulator.Simulator(alphas, tick_s=1.0, seed=4)
    sim.load()
    sent: list = []

    def capture(entries, *, redis=None):
        got = list(entries)
        sent.extend(got)
        return len(got)

    monkeypatch.setattr(ingest, "publish_encoded", capture)
    monkeypatch.setattr(ingest, "publish_many", lambda *a, **k: pytest.fail("full path used"))
    for now in (1_700_000_000.25, 1_700_000_001.5):
        items = sim.samples(now)
        sent.clear()
        assert sim.publish(items) == len(items) == 16
        assert sent == [(n, pack(encode(n, s, key=k))) for n, s, k in items]
    # the drafters' samples (one shape per pipeline and profile) were templated
    drafters = sum(1 for role in sim.roles.values() if role == "draft")
    assert 0 < len(sim.encoder.templates) <= drafters


@pytest.mark.parametrize(
    "sample",
    [
        f.draft_sample(ts=1000.5),
        f.verify_sample(ts=1000.5),
        {"ts": 7, "interval_s": 1, "role": "draft", "simulated": True, "utilization": 0.0},
        {"ts": 7.0, "interval_s": 1.0, "role": "draft", "simulated": True, "utilization": 0},
    ],
)
def test_encoder_entries_equal_encode(sample):
    enc = Encoder(max_shapes=2)
    key = "ab" * 32
    for ts in (sample["ts"], 1_700_000_000.125, 3):
        s = {**sample, "ts": ts}
        assert enc.entry(9, s, key) == pack(encode(9, s, key=key))
        assert enc.entry(10, s, key) == pack(encode(10, s, key=key))


def test_encoder_keeps_a_bounded_number_of_shapes():
    enc = Encoder(max_shapes=3)
    for i in range(10):
        sample = {"ts": 1.0, "interval_s": 1.0, "role": "draft", "utilization": i / 10}
        assert enc.entry(1, sample, "k" * 64) == pack(encode(1, sample, key="k" * 64))
    assert len(enc.templates) <= 3
