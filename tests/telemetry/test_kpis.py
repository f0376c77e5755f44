"""Headline figures: real nodes apart from simulated ones (issue 14: 63.1k tok/s and 8.2 kW
while the real pipeline was at 0), the `simulated` label on /metrics, and the last measured
acceptance kept after traffic stops instead of "—"."""

import json

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from fleet.telemetry.aggregator import Aggregator
from fleet.telemetry.ingest import client, encode
from fleet.telemetry.registry import load_registry
from fleet.telemetry.snapshot import LIVE_KEY
from tests.telemetry import factories as f

pytestmark = pytest.mark.django_db

NOW = 1000.0


@pytest.fixture
def mixed_fleet():
    """A real pipeline (idle: its verifier reports power, no tokens) and a simulated one
    (busy: 34 tok/s, 300 W + 100 W)."""
    real_p = f.pipeline(name="real")
    sim_p = f.pipeline(name="sim")
    sim_p.simulated = True
    sim_p.save(update_fields=["simulated"])
    real_v, real_vt = f.node(name="gpu-real")
    sim_v, sim_vt = f.node(name="gpu-sim", simulated=True)
    sim_d, sim_dt = f.node(name="sram-sim", simulated=True)
    f.place(real_v, real_p, "verify")
    f.place(sim_v, sim_p, "verify")
    f.place(sim_d, sim_p, "draft")
    agg = Aggregator(clock=lambda: NOW)
    agg.set_registry(load_registry())
    agg.test_keys = {sim_v.id: f.key_of(sim_v.id, sim_vt)}  # type: ignore[attr-defined]
    idle = dict(
        num_drafts=0,
        num_draft_tokens=0,
        num_accepted_tokens=0,
        num_accepted_tokens_per_pos=[],
        generation_tokens=0,
        verify_batch_hist={},
        itl_s=[],
        power_w=120.0,
    )
    for i in range(3):
        t = NOW + i
        agg.ingest_entry(
            encode(real_v.id, f.verify_sample(ts=t, **idle), key=f.key_of(real_v.id, real_vt)),
            now=t,
        )
        agg.ingest_entry(
            encode(sim_v.id, f.verify_sample(ts=t), key=f.key_of(sim_v.id, sim_vt)), now=t
        )
        agg.ingest_entry(
            encode(sim_d.id, f.draft_sample(ts=t), key=f.key_of(sim_d.id, sim_dt)), now=t
        )
    return agg


def test_headline_kpis_are_real_nodes_only(mixed_fleet):
    msg = mixed_fleet.build(NOW + 2.5)["fleet"]
    real, sim = msg["kpis"], msg["kpis_simulated"]
    assert real["nodes"] == 1 and real["reporting"] == 1
    assert real["power_w"] == pytest.approx(120)
    assert real["tokens_per_s"] == 0 and real["acceptance_rate"] is None
    assert sim["nodes"] == 2 and sim["reporting"] == 2
    assert sim["tokens_per_s"] == pytest.approx(34)
    assert sim["power_w"] == pytest.approx(400)
    assert sim["acceptance_rate"] == pytest.approx(0.6)
    assert msg["totals"]["simulated_nodes"] == 2  # the all-nodes totals are still there
    wall = mixed_fleet.build(NOW + 2.6)["wall"]
    assert wall["kpis"]["power_w"] == pytest.approx(120)  # the wall gets the same split


def _metrics() -> dict:
    out: dict = {}
    text = Client(REMOTE_ADDR="127.0.0.1").get("/metrics?per_node=1").content.decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_metrics_label_simulated_series(settings, mixed_fleet):
    settings.METRICS_TOKEN = ""
    client().hset(LIVE_KEY, mapping=mixed_fleet.build(NOW + 2.5)["snapshot"])
    s = _metrics()
    power = {x.labels["node"]: x.labels["simulated"] for x in s["tandem:node_power_usage_watts"]}
    assert power == {"gpu-real": "false", "gpu-sim": "true", "sram-sim": "true"}
    drafts = s["tandem:spec_decode_num_drafts_total"]
    assert {x.labels["node"]: x.labels["simulated"] for x in drafts}["gpu-sim"] == "true"
    pipes = {x.labels["pipeline"]: x.labels["simulated"] for x in s["tandem:pipeline_tokens_per_s"]}
    assert pipes == {"real": "false", "sim": "true"}
    fleet_power = {x.labels["simulated"]: x.value for x in s["tandem:fleet_power_watts"]}
    assert fleet_power == {"false": pytest.approx(120), "true": pytest.approx(400)}
    fleet_tps = {x.labels["simulated"]: x.value for x in s["tandem:fleet_tokens_per_second"]}
    assert fleet_tps["true"] == pytest.approx(34) and fleet_tps["false"] == 0
    per_pos = s["tandem:spec_decode_num_draft_tokens_per_pos_total"]
    assert {x.labels["position"]: x.value for x in per_pos if x.labels["node"] == "gpu-sim"} == {
        "0": 30,
        "1": 30,
        "2": 30,
        "3": 30,
    }


def test_last_measured_acceptance_outlives_the_live_window(mixed_fleet):
    live = mixed_fleet.build(NOW + 2.5)
    sim_pipe = next(p for p in live["fleet"]["pipelines"] if p["name"] == "sim")
    assert sim_pipe["stats"]["acceptance_rate"] == pytest.approx(0.6)
    assert sim_pipe["last_measured"] is None  # no rollup bucket closed yet
    mixed_fleet.close_buckets(NOW + 10.1)  # the bucket [NOW, NOW + 10) closes
    later = mixed_fleet.build(NOW + 40)  # traffic stopped: the window is empty
    sim_pipe = next(p for p in later["fleet"]["pipelines"] if p["name"] == "sim")
    assert sim_pipe["stats"]["acceptance_rate"] is None
    last = sim_pipe["last_measured"]
    assert last["acceptance_rate"] == pytest.approx(0.6)
    assert last["mean_acceptance_length"] == pytest.approx(3.4)
    assert last["alpha"] is not None
    assert last["tokens_per_s"] == pytest.approx(34 * 3 / 10)  # the bucket's, as charted
    assert last["last_measured_at"] == NOW + 10 and last["age_s"] == 30.0
    assert later["fleet"]["kpis_simulated"]["last_measured"]["acceptance_rate"] == pytest.approx(
        0.6
    )
    assert later["fleet"]["kpis"]["last_measured"] is None  # the real pipeline never drafted
    node_id = next(r["id"] for r in later["fleet"]["nodes"] if r["name"] == "gpu-sim")
    node_msg = mixed_fleet.node_message(node_id, later["node_rows"], NOW + 40)
    assert node_msg["stats"] == {} and node_msg["last_measured"]["acceptance_rate"] == 0.6


def test_last_measured_is_the_last_closed_bucket_with_enough_rounds_not_the_tail(mixed_fleet):
    """Issue 24.2: a burst's tail (one round, nothing accepted) alone in the live window read
    "0.0 % / 1.00" while the chart's last bucket said otherwise. The last measured figures are
    the last closed 10 s bucket's with at least MIN_DRAFTS rounds, as its rollup row says."""
    from fleet.nodes.models import Node
    from fleet.pipelines.models import Pipeline
    from fleet.telemetry.merge import MIN_DRAFTS

    sim_v = Node.objects.get(name="gpu-sim")
    sim_p = Pipeline.objects.get(name="sim")
    tail = f.verify_sample(
        ts=NOW + 12,
        num_drafts=1,
        num_draft_tokens=4,
        num_accepted_tokens=0,
        num_accepted_tokens_per_pos=[0, 0, 0, 0],
        generation_tokens=1,
    )
    rows = mixed_fleet.close_buckets(NOW + 10.1)
    pipe_row = next(
        r
        for r in rows
        if (r["scope"], r["scope_id"], r["resolution_s"]) == ("pipeline", sim_p.pk, 10)
    )
    assert pipe_row["data"]["drafts"] >= MIN_DRAFTS
    mixed_fleet.ingest_entry(
        encode(sim_v.id, tail, key=mixed_fleet.test_keys[sim_v.id]), now=NOW + 12
    )
    during = mixed_fleet.build(NOW + 12.5)  # only the tail in the live window
    sim_pipe = next(p for p in during["fleet"]["pipelines"] if p["name"] == "sim")
    assert sim_pipe["stats"]["acceptance_rate"] == 0.0  # live: the tail, as it is
    mixed_fleet.close_buckets(NOW + 20.1)  # a bucket of one round: too few to headline
    later = mixed_fleet.build(NOW + 40)
    sim_pipe = next(p for p in later["fleet"]["pipelines"] if p["name"] == "sim")
    last = sim_pipe["last_measured"]
    assert last["acceptance_rate"] == pipe_row["data"]["acceptance_rate"] == pytest.approx(0.6)
    assert last["mean_acceptance_length"] == pipe_row["data"]["mean_acceptance_length"]
    assert last["last_measured_at"] == NOW + 10
    kpis = later["fleet"]["kpis_simulated"]["last_measured"]
    assert kpis["acceptance_rate"] == pytest.approx(0.6)
    node_msg = mixed_fleet.node_message(sim_v.id, later["node_rows"], NOW + 40)
    assert node_msg["last_measured"]["acceptance_rate"] == pytest.approx(0.6)


def test_pages_headline_the_real_nodes_and_label_the_simulated(viewer, mixed_fleet):
    client().hset(LIVE_KEY, mapping=mixed_fleet.build(NOW + 2.5)["snapshot"])
    c = Client()
    c.force_login(viewer)
    fleet = c.get("/fleet/").content.decode()
    assert 'data-k="power">120 W<' in fleet  # real only (all nodes: 520 W)
    assert 'data-k="tps">0<' in fleet
    assert "34 tok/s not included" in fleet
    home = c.get("/").content.decode()
    assert 'data-o="power">120 W<' in home and 'data-o="tps">0<' in home
    assert "34 tok/s on 2 simulated nodes (not included)" in home
    wall = c.get("/wall/").content.decode()
    assert 'data-w="power">120 W<' in wall and 'data-w="tps">0<' in wall
    assert "34 tok/s on 2 simulated nodes not included" in wall


def test_pages_show_the_last_measured_acceptance_after_traffic_stops(viewer, mixed_fleet):
    mixed_fleet.build(NOW + 2.5)
    mixed_fleet.close_buckets(NOW + 10.1)
    client().hset(LIVE_KEY, mapping=mixed_fleet.build(NOW + 40)["snapshot"])
    c = Client()
    c.force_login(viewer)
    home = c.get("/").content.decode()
    row = home.split('class="num c-acc">')[2]  # the simulated pipeline's row
    assert row.startswith("60.0%") and "last measured 30 s ago" in row


def test_fleet_rollups_and_the_walls_series_keep_real_and_simulated_apart(viewer, mixed_fleet):
    from datetime import timedelta

    from django.utils import timezone

    from fleet.telemetry import rollups
    from fleet.telemetry.merge import FLEET_ALL, FLEET_REAL, FLEET_SIMULATED
    from fleet.telemetry.models import Rollup

    built = mixed_fleet.build(NOW + 2.5)["fleet"]
    real, sim = built["kpis"], built["kpis_simulated"]  # the live points, split by role too
    assert real["power_verify_w"] == pytest.approx(120) and real["power_draft_w"] == 0
    assert sim["power_verify_w"] == pytest.approx(300) and sim["power_draft_w"] == 100

    rows = mixed_fleet.close_buckets(NOW + 10.1)
    fleet = {r["scope_id"]: r["data"] for r in rows if r["scope"] == "fleet"}
    assert set(fleet) == {FLEET_ALL, FLEET_REAL, FLEET_SIMULATED}
    # 3 s of samples in a 10 s bucket: 520 W, 120 W and 400 W over 3 of its 10 s
    assert fleet[FLEET_ALL]["power_w"] == pytest.approx(156)
    assert fleet[FLEET_REAL]["power_w"] == pytest.approx(36)
    assert fleet[FLEET_REAL]["tokens_per_s"] == 0
    assert fleet[FLEET_SIMULATED]["power_w"] == pytest.approx(120)
    assert fleet[FLEET_SIMULATED]["tokens_per_s"] == pytest.approx(34 * 3 / 10)
    rollups.write(rows)
    Rollup.objects.update(start=timezone.now() - timedelta(minutes=5))

    series = rollups.fleet_series(minutes=30)
    assert len(series["t"]) == 1
    assert series["power_w"] == [pytest.approx(36)] and series["tokens_per_s"] == [0]
    assert series["power_verify_w"] == [pytest.approx(36)]
    assert series["simulated_power_w"] == [pytest.approx(120)]
    assert series["simulated_tokens_per_s"] == [pytest.approx(10.2)]

    c = Client()  # what the wall draws: the same split
    c.force_login(viewer)
    page = c.get("/wall/").content.decode()
    data = page.split('id="wall-data" type="application/json">')[1].split("</script>")[0]
    drawn = json.loads(data)["fleet_series"]
    assert drawn["power_w"] == [pytest.approx(36)]
    assert drawn["simulated_power_w"] == [pytest.approx(120)]


def test_a_bucket_with_one_class_only_leaves_the_other_empty():
    from datetime import UTC, timedelta

    from django.utils import timezone

    from fleet.telemetry import rollups
    from fleet.telemetry.merge import FLEET_REAL, FLEET_SIMULATED
    from fleet.telemetry.models import Rollup

    now = timezone.now().astimezone(UTC).replace(microsecond=0)
    first, second = now - timedelta(minutes=3), now - timedelta(minutes=2)
    Rollup.objects.create(
        scope="fleet", scope_id=FLEET_REAL, resolution_s=10, start=first, data={"power_w": 5.0}
    )
    Rollup.objects.create(
        scope="fleet",
        scope_id=FLEET_SIMULATED,
        resolution_s=10,
        start=second,
        data={"power_w": 7.0},
    )
    series = rollups.fleet_series(minutes=30)
    assert series["t"] == [first.timestamp() + 10, second.timestamp() + 10]
    assert series["power_w"] == [5.0, None]
    assert series["simulated_power_w"] == [None, 7.0]


def test_pipeline_and_node_pages_first_paint_the_last_measured(viewer, mixed_fleet):
    from fleet.nodes.models import Node
    from fleet.pipelines.models import Pipeline

    mixed_fleet.build(NOW + 2.5)
    mixed_fleet.close_buckets(NOW + 10.1)
    client().hset(LIVE_KEY, mapping=mixed_fleet.build(NOW + 40)["snapshot"])
    c = Client()
    c.force_login(viewer)
    pipeline = Pipeline.objects.get(name="sim")
    node = Node.objects.get(name="gpu-sim")
    for path in (f"/pipelines/{pipeline.pk}/", f"/nodes/{node.pk}/"):
        html = c.get(path).content.decode()
        kpis = html.split('id="kpis"')[1].split("</section>")[0]
        assert 'data-k="acceptance_rate">60.0%<' in kpis, path
        assert 'data-k="mean_acceptance_length">3.40<' in kpis, path
        assert "last measured 30 s ago" in kpis, path
        assert 'data-last="1"' in kpis, path
    live = Pipeline.objects.get(name="real")  # never drafted: nothing to keep, no label
    html = c.get(f"/pipelines/{live.pk}/").content.decode()
    assert "last measured" not in html.split('id="kpis"')[1].split("</section>")[0]
