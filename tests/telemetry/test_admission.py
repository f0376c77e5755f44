"""Telemetry you can believe: replays, samples out of the freshness window and physically
impossible counters are dropped and counted by reason, and the aggregator's figures (live
messages, totals, /metrics) do not move. Real Redis stream, real aggregator core."""

import json
import time

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from fleet.telemetry.aggregator import Aggregator
from fleet.telemetry.ingest import STREAMS, client, publish_sample, stream_of
from fleet.telemetry.registry import load_registry
from fleet.telemetry.snapshot import LIVE_KEY
from tests.telemetry import factories as f

pytestmark = pytest.mark.django_db

TEN_YEARS_S = 10 * 365 * 86400


@pytest.fixture
def verifier():
    p = f.pipeline(name="chat")
    v, token = f.node(name="gpu-1")
    f.place(v, p, "verify")
    return v, token


def _drain(agg: Aggregator, after: str, *, now: float) -> str:
    """Ingest every stream entry after `after`, as the aggregator's loop does; the last id.
    (The tests' node ids are few: entries of every shard stream, in id order.)"""
    entries: list = [e for s in STREAMS for e in client().xrange(s, min=f"({after}")]  # type: ignore[union-attr]
    for entry_id, fields in sorted(entries, key=lambda e: tuple(map(int, e[0].split(b"-")))):
        agg.ingest_entry(fields, now=now)
        after = entry_id.decode()
    return after


def _figures(agg: Aggregator, node_id: int, now: float) -> dict:
    built = agg.build(now)
    node = json.loads(built["snapshot"][f"n:{node_id}"])
    return {"fleet": built["fleet"], "node": node, "samples": agg.samples_ok}


def _metrics() -> dict:
    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics?per_node=1")  # node-labelled series
    assert response.status_code == 200
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_replays_time_shifts_and_impossible_counters_are_dropped_and_counted(settings, verifier):
    settings.METRICS_TOKEN = ""
    v, token = verifier
    now = time.time()
    agg = Aggregator(clock=lambda: now)
    agg.set_registry(load_registry())
    cursor = "0-0"
    for i in range(3):  # three honest seconds, signed by the node's own token
        publish_sample(v.id, f.verify_sample(ts=now - 3 + i), token=token)
    cursor = _drain(agg, cursor, now=now)
    before = _figures(agg, v.id, now)
    assert before["samples"] == 3 and before["node"]["totals"]["num_drafts"] == 30
    client().hset(LIVE_KEY, mapping=agg.build(now)["snapshot"])
    metrics_before = _metrics()

    r = client()
    honest = [fields for _, fields in r.xrange(stream_of(v.id))]
    for _ in range(5):  # an attacker with access to Redis adds the signed entries again
        r.xadd(stream_of(v.id), honest[-1])
    r.xadd(stream_of(v.id), honest[0])  # and an older one
    publish_sample(v.id, f.verify_sample(ts=now + TEN_YEARS_S), token=token)
    publish_sample(v.id, f.verify_sample(ts=0.0), token=token)  # 1970
    publish_sample(v.id, f.verify_sample(ts=now + 0.5, num_drafts=10**15), token=token)
    publish_sample(v.id, f.verify_sample(ts=now + 0.6, power_w=1e9), token=token)
    cursor = _drain(agg, cursor, now=now + 0.7)

    assert dict(agg.dropped) == {"replay": 6, "future": 1, "stale": 1, "impossible": 2}
    assert _figures(agg, v.id, now) == before
    snapshot = agg.build(now)["snapshot"]
    assert json.loads(snapshot["meta"])["dropped"] == dict(agg.dropped)  # the status
    client().hset(LIVE_KEY, mapping=snapshot)
    metrics_after = _metrics()
    for reason, count in {"replay": 6, "future": 1, "stale": 1, "impossible": 2}.items():
        assert metrics_after[("tandem:telemetry_samples_dropped_total", (("reason", reason),))] == (
            count
        )
    labels = (("node", "gpu-1"), ("pipeline", "chat"), ("role", "verify"), ("simulated", "false"))
    for name in ("tandem:spec_decode_num_drafts_total", "tandem:generation_tokens_total"):
        assert metrics_after[(name, labels)] == metrics_before[(name, labels)]

    # The node's next honest sample is taken as usual.
    publish_sample(v.id, f.verify_sample(ts=now + 1), token=token)
    _drain(agg, cursor, now=now + 1)
    assert agg.samples_ok == 4


def test_the_freshness_window_tolerates_clock_skew(verifier):
    v, token = verifier
    now = time.time()
    agg = Aggregator(clock=lambda: now)
    agg.set_registry(load_registry())
    publish_sample(v.id, f.verify_sample(ts=now - 50), token=token)  # a node 50 s behind
    publish_sample(v.id, f.verify_sample(ts=now + 20), token=token)  # a node 20 s ahead
    _drain(agg, "0-0", now=now)
    assert agg.samples_ok == 2 and not agg.dropped


def test_figures_a_real_node_reports_are_possible_on_a_modest_profile(verifier):
    """The bounds stop absurd figures, not busy hardware: a batch of 64 at k=8 on a 1-TFLOPS
    CPU, 50 verify steps a second, at twice the profile's TDP (a whole server on RAPL)."""
    v, token = verifier
    small = f.profile("tiny-cpu")
    type(small).objects.filter(pk=small.pk).update(peak_bf16_tflops=1, tdp_w=65)
    type(v).objects.filter(pk=v.pk).update(profile=small)
    now = time.time()
    agg = Aggregator(clock=lambda: now)
    agg.set_registry(load_registry())
    busy = {
        "num_drafts": 64 * 50,
        "num_draft_tokens": 64 * 50 * 8,
        "num_accepted_tokens": 64 * 50 * 7,
        "num_accepted_tokens_per_pos": [3200] * 8,
        "generation_tokens": 64 * 50 * 8,
        "verify_batch_hist": {"64": 50},
        "power_w": 130.0,
        "power_source": "measured-rapl",
    }
    publish_sample(v.id, f.verify_sample(ts=now, **busy), token=token)
    publish_sample(v.id, f.verify_sample(ts=now + 0.1, generation_tokens=10**12), token=token)
    _drain(agg, "0-0", now=now)
    assert agg.samples_ok == 1 and dict(agg.dropped) == {"impossible": 1}


def test_a_sample_cannot_claim_more_time_than_has_passed(verifier):
    """Counter bounds are per second of a sample's interval: samples 1 ms apart claiming an
    hour each (or a first sample claiming an hour) would multiply them, so they are dropped."""
    v, token = verifier
    now = time.time()
    agg = Aggregator(clock=lambda: now)
    agg.set_registry(load_registry())
    publish_sample(v.id, f.verify_sample(ts=now - 10, interval_s=3600), token=token)
    publish_sample(v.id, f.verify_sample(ts=now - 2), token=token)
    publish_sample(v.id, f.verify_sample(ts=now - 1.999, interval_s=3600), token=token)
    publish_sample(v.id, f.verify_sample(ts=now - 1.998, interval_s=3600), token=token)
    publish_sample(v.id, f.verify_sample(ts=now), token=token)  # 2 s later: 1 s claimed
    _drain(agg, "0-0", now=now)
    assert agg.samples_ok == 2 and dict(agg.dropped) == {"impossible": 3}


def test_a_big_gpu_or_a_profile_without_figures_cannot_report_billions_of_tokens(verifier):
    """One 1-second sample of 2.6e9 tokens: the FLOPs bound of a ~1 PFLOPS GPU (which
    assumes the smallest model) allowed it, and so did a profile without figures; the
    per-node cap refuses it on both, while a busy honest second on the GPU is taken."""
    v, token = verifier
    gpu = f.profile("big-gpu")
    type(gpu).objects.filter(pk=gpu.pk).update(peak_bf16_tflops=989, tdp_w=700)
    type(v).objects.filter(pk=v.pk).update(profile=gpu)
    now = time.time()
    agg = Aggregator(clock=lambda: now)
    agg.set_registry(load_registry())
    publish_sample(v.id, f.verify_sample(ts=now - 3, generation_tokens=200_000), token=token)
    publish_sample(v.id, f.verify_sample(ts=now - 2, generation_tokens=2_600_000_000), token=token)
    type(gpu).objects.filter(pk=gpu.pk).update(peak_bf16_tflops=0)  # no figures
    agg.set_registry(load_registry())
    publish_sample(v.id, f.verify_sample(ts=now - 1, generation_tokens=2_600_000_000), token=token)
    _drain(agg, "0-0", now=now)
    assert agg.samples_ok == 1 and dict(agg.dropped) == {"impossible": 2}
