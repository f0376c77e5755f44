"""Ingest -> aggregator core -> live messages and rollups (real Redis stream, test DB)."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.telemetry.aggregator import Aggregator
from fleet.telemetry.ingest import client, encode, publish_sample, stream_of, unpack
from fleet.telemetry.models import Rollup
from fleet.telemetry.registry import load_registry
from fleet.telemetry.rollups import prune, series, write
from fleet.telemetry.samples import InvalidSample
from tests.telemetry import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet_setup():
    p = f.pipeline()
    v, v_token = f.node(name="gpu-1")
    d, d_token = f.node(name="sram-1", simulated=True)
    f.place(v, p, "verify")
    f.place(d, p, "draft")
    idle, _ = f.node(name="idle-1", state="lost")
    return {"pipeline": p, "v": (v, v_token), "d": (d, d_token), "idle": idle}


def _agg(now=1000.0):
    agg = Aggregator(clock=lambda: now)
    agg.set_registry(load_registry())
    return agg


def test_publish_sample_puts_a_signed_entry_on_the_stream(fleet_setup):
    v, token = fleet_setup["v"]
    entry_id = publish_sample(v.id, f.verify_sample(ts=1000.0), token=token)
    [(got_id, fields)] = client().xrange(stream_of(v.id), min=entry_id, max=entry_id)
    entry = unpack(fields)  # type: ignore[arg-type]
    assert entry["node"] == str(v.id).encode()
    body = json.loads(entry["body"])
    assert body["num_accepted_tokens"] == 24 and len(entry["sig"]) == 64
    agg = _agg()
    assert agg.ingest_entry(fields, now=1000.0)
    with pytest.raises(InvalidSample):
        publish_sample(v.id, {"ts": "bad"}, token=token)
    with pytest.raises(ValueError):
        publish_sample(v.id, f.verify_sample(ts=1000.0))  # neither token nor key


def test_bad_signatures_and_unknown_nodes_are_dropped_and_counted(fleet_setup):
    v, token = fleet_setup["v"]
    agg = _agg()
    forged = encode(v.id, f.verify_sample(ts=1000.0), key=f.key_of(v.id, "tdn_wrong_token"))
    assert not agg.ingest_entry(forged, now=1000.0)
    assert agg.dropped["bad_signature"] == 1
    tampered = encode(v.id, f.verify_sample(ts=1000.0), key=f.key_of(v.id, token))
    tampered["body"] = tampered["body"].replace(
        '"num_accepted_tokens":24', '"num_accepted_tokens":40'
    )
    assert not agg.ingest_entry(tampered, now=1000.0)
    assert agg.dropped["bad_signature"] == 2
    # another node's valid token does not sign for this node
    _, d_token = fleet_setup["d"]
    assert not agg.ingest_entry(
        encode(v.id, f.verify_sample(ts=1000.0), key=f.key_of(fleet_setup["d"][0].id, d_token)),
        now=1000.0,
    )
    # unknown node: held until the next registry refresh, then dropped
    assert not agg.ingest_entry(encode(999_999, f.verify_sample(ts=1000.0), key="x"), now=1000.0)
    assert agg.has_unknown
    agg.set_registry(load_registry())
    assert agg.dropped["unknown_node"] == 1 and not agg.has_unknown
    assert agg.samples_ok == 0


def test_a_node_registered_after_its_first_sample_is_picked_up(fleet_setup):
    agg = _agg()
    late, token = f.node(name="late-1")
    assert not agg.ingest_entry(
        encode(late.id, f.verify_sample(ts=1000.0), key=f.key_of(late.id, token)), now=1000.0
    )
    agg.set_registry(load_registry())
    assert agg.samples_ok == 1


def test_revoked_token_stops_signing(fleet_setup):
    v, token = fleet_setup["v"]
    v.tokens.update(revoked_at=timezone.now())
    agg = _agg()
    assert not agg.ingest_entry(
        encode(v.id, f.verify_sample(ts=1000.0), key=f.key_of(v.id, token)), now=1000.0
    )
    assert agg.dropped["bad_signature"] == 1


def test_build_fleet_pipeline_and_node_messages(fleet_setup):
    (v, vt), (d, dt) = fleet_setup["v"], fleet_setup["d"]
    p = fleet_setup["pipeline"]
    agg = _agg()
    for i in range(3):
        agg.ingest_entry(
            encode(v.id, f.verify_sample(ts=997.0 + i), key=f.key_of(v.id, vt)), now=998.0 + i
        )
        agg.ingest_entry(
            encode(d.id, f.draft_sample(ts=997.0 + i), key=f.key_of(d.id, dt)), now=998.0 + i
        )
    built = agg.build(1000.0)
    fleet = built["fleet"]
    assert fleet["newest_ts"] == 999.0
    assert fleet["totals"]["nodes"] == 3
    assert fleet["totals"]["states"] == {"online": 2, "lost": 1}
    assert fleet["totals"]["power_w"] == pytest.approx(400)
    assert fleet["totals"]["power_source"] == "mixed"
    assert fleet["totals"]["tokens_per_s"] == pytest.approx(34)
    assert fleet["totals"]["simulated_nodes"] == 1
    rows = {r["name"]: r for r in fleet["nodes"]}
    assert rows["gpu-1"]["role"] == "verify" and rows["gpu-1"]["batch"] == 8
    assert rows["gpu-1"]["src"] == "measured-nvml"
    assert rows["sram-1"]["src"] == "modeled" and rows["sram-1"]["sim"] is True
    assert rows["idle-1"]["state"] == "lost" and rows["idle-1"]["power_w"] is None
    assert "nodes" not in built["wall"]
    pmsg = built["pipelines"][p.id]
    assert pmsg["pipeline"]["drafters"] == 1 and pmsg["pipeline"]["verifiers"] == 1
    stats = pmsg["pipeline"]["stats"]
    assert stats["acceptance_rate"] == pytest.approx(0.6)
    assert stats["mean_acceptance_length"] == pytest.approx(3.4)
    assert stats["tokens_per_j_draft"] == pytest.approx(0.34)
    assert pmsg["config"]["k_policy"] == {"mode": "fixed", "k": 4}
    node_msg = agg.node_message(v.id, built["node_rows"], 1000.0)
    assert node_msg["stats"]["acceptance_rate"] == pytest.approx(0.6)
    snap = json.loads(built["snapshot"][f"n:{v.id}"])
    assert snap["totals"]["num_drafts"] == 30
    # the window slides: nothing new for > 5 s empties the live figures
    later = agg.build(1010.0)
    assert later["fleet"]["totals"]["power_w"] is None
    assert later["node_rows"][v.id]["power_w"] is None
    assert json.loads(later["snapshot"][f"n:{v.id}"])["node"]["power_w"] is None


def test_rollups_written_pruned_and_charted(fleet_setup):
    (v, vt) = fleet_setup["v"]
    p = fleet_setup["pipeline"]
    start = 1_700_000_100.0  # a multiple of 10 and 300 s
    agg = Aggregator(clock=lambda: start)
    agg.set_registry(load_registry())
    for i in range(10):
        agg.ingest_entry(
            encode(v.id, f.verify_sample(ts=start + i), key=f.key_of(v.id, vt)), now=start + i
        )
    assert agg.close_buckets(start + 9.9) == []
    rows = agg.close_buckets(start + 10.1)
    scopes = {(r["scope"], r["scope_id"], r["resolution_s"]) for r in rows}
    # the fleet: all nodes (0) and the real ones (1); no simulated node reported (no 2)
    assert scopes == {
        ("node", v.id, 10),
        ("pipeline", p.id, 10),
        ("fleet", 0, 10),
        ("fleet", 1, 10),
    }
    fleet_row = next(r for r in rows if r["scope"] == "fleet")
    assert fleet_row["data"]["tokens_per_s"] == pytest.approx(34)
    assert fleet_row["data"]["power_w"] == pytest.approx(300)
    write(rows)
    write(rows)  # idempotent per bucket
    assert Rollup.objects.count() == 4
    long_rows = agg.close_buckets(start + 300.5)
    assert {r["resolution_s"] for r in long_rows} == {300}
    assert next(r for r in long_rows if r["scope"] == "fleet")["data"]["tokens_per_s"] == (
        pytest.approx(34 * 10 / 300, abs=0.01)
    )
    Rollup.objects.update(start=timezone.now() - timedelta(minutes=5))
    chart = series("pipeline", p.id, minutes=30)
    assert chart["acceptance_rate"] == [pytest.approx(0.6)] and len(chart["t"]) == 1
    Rollup.objects.filter(scope="node").update(start=timezone.now() - timedelta(hours=2))
    assert prune() == 1
    assert Rollup.objects.count() == 3


@pytest.mark.parametrize("offset_s", [0.0, 125.0], ids=["at-a-bucket-start", "mid-bucket"])
def test_the_leaders_rollups_through_redis_match_the_in_process_ones(
    fleet_setup, monkeypatch, settings, offset_s
):
    """The loop's path (each shard's bucket sums in a real Redis, the leader's scope rows)
    writes the same rollups as `close_buckets` does in one process: 10 s and 5 minutes, for
    an aggregator started at a 5-minute boundary or 125 s into one. (The 5-minute pipeline
    and fleet rows divided five minutes of energy by one 10 s bucket's span: 30x the power.)"""
    import asyncio

    import redis.asyncio as aioredis

    from fleet.telemetry import partials, rollup_writer

    (v, vt), (d, dt) = fleet_setup["v"], fleet_setup["d"]
    base = 1_700_000_100.0  # a multiple of 10 and 300 s
    started = base + offset_s
    clock = [started]
    in_loop = Aggregator(tick_s=1.0, clock=lambda: clock[0])
    in_process = Aggregator(tick_s=1.0, clock=lambda: started)
    for agg in (in_loop, in_process):
        agg.set_registry(load_registry())
    written: list[dict] = []
    monkeypatch.setattr(rollup_writer, "write_rollups", lambda rows: written.extend(rows))
    expected: list[dict] = []

    async def drive() -> None:
        r = aioredis.from_url(settings.REDIS_URL)
        await r.delete(
            *(partials.rollup_key(10, base + i * 10) for i in range(32)),
            partials.rollup_key(300, base),
            partials.rollup_key(300, base + 300),
        )
        background: set = set()
        t = started
        while t < base + 300 + 12:
            for node, token, sample in ((v, vt, f.verify_sample), (d, dt, f.draft_sample)):
                entry = encode(node.id, sample(ts=t), key=f.key_of(node.id, token))
                for agg in (in_loop, in_process):
                    agg.ingest_entry(entry, now=t)
            t += 1.0
            clock[0] = t
            expected.extend(in_process.close_buckets(t))
            await in_loop._close_due(r, t, background)
        await asyncio.gather(*background)
        await r.aclose()

    asyncio.run(drive())

    def figures(rows: list[dict]) -> dict:
        return {
            (r["scope"], r["scope_id"], r["resolution_s"], r["start"].timestamp()): (
                r["data"]["power_w"],
                r["data"]["tokens_per_s"],
            )
            for r in rows
            if r["start"].timestamp() < base + 300  # the last 10 s ones may still be open
        }

    got, want = figures(written), figures(expected)
    assert ("fleet", 0, 300, base) in want and ("pipeline", fleet_setup["pipeline"].id, 300, base)
    assert got.keys() == want.keys()
    for key, (power_w, tokens_per_s) in want.items():
        assert got[key] == (pytest.approx(power_w), pytest.approx(tokens_per_s)), key
    # the fleet's 5-minute power is its 10 s buckets' average, over the seconds observed
    tens = [w[0] for k, w in want.items() if k[:3] == ("fleet", 0, 10)]
    spans = [
        10.0 - (offset_s % 10 if k[3] < started else 0) for k in want if k[:3] == ("fleet", 0, 10)
    ]
    average = sum(p * s for p, s in zip(tens, spans, strict=True)) / sum(spans)
    assert want[("fleet", 0, 300, base)][0] == pytest.approx(average, rel=1e-3)


def _tokens_since_start(agg, nid: int, now: float) -> int:
    message: dict = dict(agg.node_message(nid, None, now, totals=True))
    return message["totals"]["generation_tokens"]


def test_a_restarted_aggregator_replaying_pending_entries_writes_whole_buckets(fleet_setup):
    """An aggregator started 8 s into a bucket replays the entries its predecessor left
    pending (`_claim`: entry times before its own start), here from the bucket before too.
    Its rollups of those buckets cover them whole: not divided by the 2 s it had run (5x the
    power), not dropped for lying before its start; and the node's counters since the start
    keep the replayed samples once their bucket closes (they fell back before)."""
    (v, vt) = fleet_setup["v"]
    base = 1_700_000_100.0  # a multiple of 10 and 300 s
    agg = Aggregator(clock=lambda: base + 18.0)  # 8 s into the bucket [base + 10, base + 20)
    agg.set_registry(load_registry())
    for i in range(20):  # [base, base + 20): one bucket before the start, one across it
        entry = encode(v.id, f.verify_sample(ts=base + i), key=f.key_of(v.id, vt))
        agg.ingest_entry(entry, now=base + i)
    tokens = _tokens_since_start(agg, v.id, base + 19.5)
    rows = agg.close_buckets(base + 20.5)
    fleet = {
        r["start"].timestamp(): r["data"]
        for r in rows
        if (r["scope"], r["scope_id"], r["resolution_s"]) == ("fleet", 0, 10)
    }
    assert set(fleet) == {base, base + 10}
    assert fleet[base]["power_w"] == pytest.approx(300)
    assert fleet[base + 10]["power_w"] == pytest.approx(300)
    assert fleet[base + 10]["tokens_per_s"] == pytest.approx(34)
    after = _tokens_since_start(agg, v.id, base + 20.5)
    assert after == tokens == 20 * 34
    long_rows = agg.close_buckets(base + 300.5)  # the node's 5 minutes hold both buckets
    node_long = next(r for r in long_rows if r["scope"] == "node" and r["resolution_s"] == 300)
    assert node_long["data"]["tokens_per_s"] == pytest.approx(34 * 20 / 300, abs=0.01)


def test_node_state_changes_show_through_after_a_registry_refresh(fleet_setup):
    (v, vt) = fleet_setup["v"]
    agg = _agg()
    agg.ingest_entry(encode(v.id, f.verify_sample(ts=999.0), key=f.key_of(v.id, vt)), now=999.5)
    assert agg.build(1000.0)["node_rows"][v.id]["state"] == "online"
    type(v).objects.filter(pk=v.pk).update(state="lost")
    agg.set_registry(load_registry())
    built = agg.build(1000.5)
    assert built["node_rows"][v.id]["state"] == "lost"
    assert built["fleet"]["totals"]["states"] == {"online": 1, "lost": 2}
    type(v).objects.filter(pk=v.pk).update(state="retired")
    agg.set_registry(load_registry())
    built = agg.build(1001.0)
    assert v.id not in built["node_rows"] and f"n:{v.id}" not in built["fields"]
