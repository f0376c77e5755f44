"""Fast data-plane tests without worker processes: detokenizer, router, generation
services and the watchdog (messages to workers captured), agent arithmetic, power."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline, Placement
from inference import services, wire
from inference.models import Generation
from inference.router import NoCapacity, pick_pair
from inference.selectors import stream_of, stream_owner
from inference.text.tokenizer import Tokenizer
from inference.training import byte_tokenizer as bt
from inference.worker.agent import accumulate
from inference.worker.detok import Detokenizer
from inference.worker.engine_loop import Tombstones
from inference.worker.power import PowerMeter
from tests.worker.helpers import profile


@pytest.fixture
def sent(monkeypatch):
    out = []
    monkeypatch.setattr(wire, "send", lambda node, kind, payload: out.append((node, kind, payload)))
    return out


def byte_tok():
    return Tokenizer(bt.build_byte_tokenizer(), bos_token=bt.BOS, eos_token=bt.EOS)


def test_detokenizer_deltas_concatenate_across_multibyte_splits():
    text = "héllo wörld → 𝔘nicode ✓"
    d = Detokenizer(byte_tok())
    deltas = [d.push([b]) for b in text.encode()]
    assert "".join(deltas) + d.finish() == text
    assert not any("\ufffd" in x for x in deltas)


def test_detokenizer_holds_back_and_cuts_stop_strings():
    d = Detokenizer(byte_tok(), stop=["STOP"])
    deltas = [d.push([b]) for b in b"abc STOP def"]
    assert "".join(deltas) + d.finish() == "abc "
    assert "S" not in "".join(deltas)


def test_tombstones_fence_attempts():
    t = Tombstones(size=2)
    t.add("a", 1)
    assert t.blocks("a", 1) and not t.blocks("a", 2)
    t.add("b")
    assert t.blocks("b", 99)
    t.add("c")
    assert not t.blocks("a", 1)  # bounded: the oldest is forgotten


def _pipeline(kind="model", drafters=1, verifiers=2):
    p = Pipeline.objects.create(
        name=f"p-{kind}", target_model="t", draft_model="d", drafter_kind=kind
    )
    nodes: dict[str, list[Node]] = {"draft": [], "verify": []}
    for role, n in (("draft", drafters), ("verify", verifiers)):
        for i in range(n):
            node = Node.objects.create(
                name=f"{kind}-{role}-{i}",
                profile=profile(),
                roles=[role],
                state="online",
                last_seen=timezone.now(),
            )
            Placement.objects.create(pipeline=p, node=node, role=role)
            nodes[role].append(node)
    return p, nodes


def _submit(p, **params):
    return services.generation_submit(
        pipeline=p,
        prompt="x",
        prompt_tokens=[256, 120],
        params={"temperature": 0, "max_tokens": 8, **params},
        user=None,
    )


def test_router_least_outstanding_healthy_and_no_capacity(
    db, sent, django_capture_on_commit_callbacks, django_assert_num_queries
):
    p, nodes = _pipeline()
    v0, v1 = nodes["verify"]
    with django_capture_on_commit_callbacks(execute=True):
        g1, g2 = _submit(p), _submit(p)
    assert {g1.verifier_id, g2.verifier_id} == {v0.pk, v1.pk}  # spread by outstanding work
    with django_assert_num_queries(1):  # routing: the nodes and their load in one query
        pair = pick_pair(p)
    assert pair.verifier.pk == min(v0.pk, v1.pk) and pair.drafter is not None
    assert [k for _, k, _ in sent] == ["start", "start"]
    assert sent[0][2]["prompt_tokens"] == [256, 120] and sent[0][2]["attempt"] == 1
    Node.objects.filter(pk=v0.pk).update(state="draining")
    assert pick_pair(p).verifier.pk == v1.pk
    Node.objects.filter(pk=v1.pk).update(last_seen=timezone.now() - timedelta(hours=1))
    with pytest.raises(NoCapacity, match="no healthy verifier"):
        _submit(p)
    plain, _ = _pipeline(kind="none", drafters=0, verifiers=1)
    assert pick_pair(plain).drafter is None


def test_cancel_is_idempotent_frees_both_nodes_and_ends_the_stream(
    db, sent, django_capture_on_commit_callbacks
):
    p, nodes = _pipeline(verifiers=1)
    with django_capture_on_commit_callbacks(execute=True):
        g = _submit(p)
    with django_capture_on_commit_callbacks(execute=True):
        services.generation_cancel(generation=g)
    with django_capture_on_commit_callbacks(execute=True):
        services.generation_cancel(generation=g)  # terminal: nothing more happens
    g.refresh_from_db()
    assert g.state == "cancelled" and g.finish_reason == "cancelled"
    cancels = [(n, payload) for n, k, payload in sent if k == "cancel"]
    assert sorted(n for n, _ in cancels) == sorted([nodes["draft"][0].pk, nodes["verify"][0].pk])
    events = [e for _, e in stream_of(g.pk)]
    assert events[-1]["type"] == "done" and events[-1]["finish_reason"] == "cancelled"


def test_watchdog_deadline_reroute_and_clear_failure(
    db, sent, django_capture_on_commit_callbacks, settings
):
    p, nodes = _pipeline(verifiers=2)
    v0, v1 = nodes["verify"]
    with django_capture_on_commit_callbacks(execute=True):
        late = _submit(p, timeout_s=1)
        g = _submit(p)
    Generation.objects.filter(pk=late.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    Generation.objects.filter(pk=g.pk).update(state="running", verifier=v0)
    wire.publish(g.pk, wire.tokens_event([104, 105], "hi", 2), node=stream_owner(g.pk))
    Node.objects.filter(pk=v0.pk).update(state="lost")
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        report = services.generations_watchdog()
    assert report["timed_out"] == [str(late.pk)] and report["rerouted"] == [str(g.pk)]
    late.refresh_from_db()
    g.refresh_from_db()
    assert late.state == "failed" and late.finish_reason == "timeout" and "deadline" in late.error
    assert g.state == "queued" and g.verifier_id == v1.pk and g.attempts == 2
    assert (v1.pk, "start") in [(n, k) for n, k, _ in sent]
    assert [e["type"] for _, e in stream_of(g.pk)][-1] == "requeued"
    # the last verifier dies too: the generation fails with a clear reason, never hangs
    Generation.objects.filter(pk=g.pk).update(state="running")
    Node.objects.filter(pk=v1.pk).update(state="lost")
    with django_capture_on_commit_callbacks(execute=True):
        services.generations_watchdog()
    g.refresh_from_db()
    assert g.state == "failed" and "no healthy verifier" in g.error and "is lost" in g.error
    assert stream_of(g.pk)[-1][1]["type"] == "error"


def test_push_pipeline_config_reaches_every_placed_node(db):
    """On each placed node's list (what its engine loop reads), in one pipelined round trip."""
    from fleet import redis_clients

    p, nodes = _pipeline(verifiers=2)
    placed = [n.pk for ns in nodes.values() for n in ns]
    for node_id in placed:
        wire.discard_rounds(node_id)
    client = redis_clients.client()
    real_pipeline, trips = client.pipeline, []

    class Counting:
        """A pipeline that records how many commands each round trip carries."""

        def __init__(self, *args, **kwargs):
            self.pipe = real_pipeline(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self.pipe, name)

        def execute(self, *args, **kwargs):
            trips.append(len(self.pipe.command_stack))
            return self.pipe.execute(*args, **kwargs)

    setattr(client, "pipeline", Counting)  # noqa: B010 (an instance attribute, undone below)
    try:
        services.push_pipeline_config(p)
    finally:
        del client.pipeline
    assert trips == [2 * len(placed)]  # one round trip: RPUSH + EXPIRE per node
    for node_id in placed:
        [(kind, payload)] = wire.receive(node_id, timeout_s=1)
        assert kind == "config" and payload["version"] == p.version
        assert payload["config"]["k_policy"] == {"mode": "fixed", "k": 4}
        assert payload["pipeline"] == p.pk


def test_send_many_refuses_kinds_that_go_through_the_broker():
    with pytest.raises(ValueError):
        wire.send_many([1, 2], "cancel", {})


def test_accumulate_and_modeled_power():
    a = {
        "interval_s": 1.0,
        "num_drafts": 2,
        "verify_batch_hist": {"4": 1},
        "power_w": 10.0,
        "queue_depth": 3,
    }
    b = {
        "interval_s": 3.0,
        "num_drafts": 1,
        "verify_batch_hist": {"4": 2, "8": 1},
        "power_w": 20.0,
        "queue_depth": 1,
    }
    s = accumulate([a, b])
    assert s["interval_s"] == 4.0 and s["num_drafts"] == 3 and s["queue_depth"] == 1
    assert s["verify_batch_hist"] == {"4": 3, "8": 1} and s["power_w"] == pytest.approx(17.5)
    meter = PowerMeter(idle_w=10, tdp_w=110)
    sample = meter.read(0.5)
    assert sample.source in ("modeled", "measured-rapl")
    if sample.source == "modeled":
        assert sample.watts == pytest.approx(60)
