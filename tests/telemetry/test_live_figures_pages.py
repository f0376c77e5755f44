"""The pages read the same live snapshot the fleet table does: a simulated node's own page
shows the figures its row shows (issue 14: "No telemetry yet" beside 7.3k tok/s)."""

import time

import pytest
from django.test import Client

from fleet.nodes.models import Node
from fleet.planner import simulator
from fleet.telemetry.aggregator import Aggregator
from fleet.telemetry.ingest import client, encode
from fleet.telemetry.registry import load_registry
from fleet.telemetry.snapshot import LIVE_KEY

pytestmark = pytest.mark.django_db


def _simulated_fleet_live(seconds: int = 3):
    alphas = simulator.setup_fleet(nodes=4, pipelines=1)
    sim = simulator.Simulator(alphas, tick_s=1.0, publish=len)
    sim.load()
    agg = Aggregator()
    agg.set_registry(load_registry())
    now = time.time()
    for i in range(seconds):
        for node_id, sample, key in sim.samples(now + i):
            agg.ingest_entry(encode(node_id, sample, key=key), now=now + i)
    built = agg.build(now + seconds - 0.5)
    client().hset(LIVE_KEY, mapping=built["snapshot"])
    return built


def test_a_simulated_nodes_page_shows_what_its_fleet_row_shows(viewer):
    built = _simulated_fleet_live()
    verifier = Node.objects.filter(simulated=True, placement__role="verify").first()
    assert verifier is not None
    row = built["node_rows"][verifier.pk]
    assert row["tps"] and row["tps"] > 0  # the fleet table's figure
    c = Client()
    c.force_login(viewer)
    html = c.get(f"/nodes/{verifier.pk}/").content.decode()
    assert "never" not in html.split('id="node-seen"')[1][:40]
    goodput = html.split('data-k="tokens_per_s">')[1].split("<")[0]
    assert goodput not in ("—", "") and float(goodput.replace(",", "")) == pytest.approx(
        row["tps"], rel=0.01
    )
