"""Simulator smoke: a small simulated fleet sends real, signed samples to the Redis stream,
heartbeats its nodes and follows rebalancing."""

import json

import pytest
from django.core.management import call_command

from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline, Placement
from fleet.pipelines.services import node_drain, pipeline_set_k_policy
from fleet.planner import simulator
from fleet.telemetry.ingest import STREAMS, client, unpack, verify
from fleet.telemetry.registry import load_registry

pytestmark = pytest.mark.django_db


def _entries(r, after="0"):
    """Every shard stream's entries from `after` on."""
    return [e for stream in STREAMS for e in r.xrange(stream, min=after)]


def test_small_fleet_sends_signed_samples_to_the_real_stream():
    r = client()
    start = r.xadd(STREAMS[0], {"node": "0", "body": "{}", "sig": "x"}).decode()
    alphas = simulator.setup_fleet(nodes=12, pipelines=2, alphas=(0.6, 0.8))
    assert Pipeline.objects.filter(simulated=True).count() == 2
    assert Node.objects.filter(simulated=True).count() == 12
    assert set(Node.objects.filter(simulated=True).values_list("profile__kind", flat=True)) == {
        "gpu",
        "sram-accelerator",
    }
    assert not Placement.objects.filter(
        node__simulated=True, node__profile__kind="sram-accelerator", role="verify"
    ).exists()
    sim = simulator.Simulator(alphas, tick_s=0.05, seed=1)
    sim.run(seconds=0.2)
    entries = [e for e in _entries(r, start) if e[0].decode() != start]
    assert len(entries) >= 12
    digests = dict(Node.objects.filter(simulated=True).values_list("pk", "tokens__token_hash"))
    keys = load_registry().keys  # what the aggregator verifies with
    verifier_bodies = []
    for _, fields in entries:
        entry = unpack(fields)
        node_id = int(entry["node"])
        body = entry["body"].decode()
        assert verify(body, entry["sig"].decode(), keys[node_id])
        assert not verify(body, entry["sig"].decode(), [digests[node_id]])  # not the DB's
        sample = json.loads(body)
        assert sample["simulated"] is True and sample["power_source"] == "modeled"
        if sample["role"] == "verify":
            verifier_bodies.append(sample)
    assert any(s["num_accepted_tokens"] > 0 and s["generation_tokens"] > 0 for s in verifier_bodies)
    assert Node.objects.filter(simulated=True, last_seen__isnull=True).count() == 0


def test_simulator_follows_rebalancing():
    alphas = simulator.setup_fleet(nodes=8, pipelines=1)
    sent = []

    def publish(items):
        sent.append(items)
        return len(items)

    sim = simulator.Simulator(alphas, tick_s=0.05, publish=publish)
    sim.load()
    pipeline = Pipeline.objects.get(simulated=True)
    pipeline_set_k_policy(
        pipeline_id=pipeline.pk, actor="planner", k_policy={"mode": "fixed", "k": 0}
    )
    placement = Placement.objects.filter(pipeline=pipeline, role="verify").first()
    assert placement is not None
    drained = placement.node
    node_drain(node_id=drained.pk, actor="planner")
    assert sim.changed()
    sim.step()
    samples = {n: s for n, s, _ in sent[-1]}
    verifiers = [s for s in samples.values() if s["role"] == "verify" and s.get("pipeline")]
    assert verifiers and all(s["num_draft_tokens"] == 0 for s in verifiers)  # k = 0 now
    assert samples[drained.pk].get("utilization") == 0.0  # a drained node takes no work


def test_simulate_command_and_reset():
    call_command(
        "simulate",
        "--nodes",
        "6",
        "--pipelines",
        "2",
        "--seconds",
        "0.1",
        "--tick",
        "0.05",
        "--prefix",
        "cmd",
    )
    assert Node.objects.filter(name__startswith="cmd-", simulated=True).count() == 6
    call_command(
        "simulate",
        "--nodes",
        "4",
        "--pipelines",
        "1",
        "--seconds",
        "0",
        "--prefix",
        "cmd",
        "--reset",
    )
    assert Node.objects.filter(name__startswith="cmd-", simulated=True).count() == 4


def test_heartbeat_brings_lost_nodes_back_but_leaves_drained_ones():
    alphas = simulator.setup_fleet(nodes=4, pipelines=1)
    sim = simulator.Simulator(alphas, publish=lambda items: len(items))
    sim.load()
    a, b = Node.objects.filter(simulated=True)[:2]
    Node.objects.filter(pk=a.pk).update(state="lost")
    Node.objects.filter(pk=b.pk).update(state="draining")
    sim.heartbeat()
    assert Node.objects.get(pk=a.pk).state == "online"
    assert Node.objects.get(pk=b.pk).state == "draining"
