"""A node worker that `manage.py up` ran died (or was found not running at start): its node
is lost at once and its generations move to a healthy pair or end with an error event --
without waiting for the heartbeat window. Messages to workers are captured."""

from __future__ import annotations

import pytest

from fleet import redis_clients
from fleet.nodes.models import Node
from inference import services, wire
from inference.models import Generation
from inference.selectors import stream_of, stream_owner
from inference.timeline import timeline
from tests.worker.test_units import _pipeline, _submit


@pytest.fixture
def sent(monkeypatch):
    out = []
    monkeypatch.setattr(wire, "send", lambda node, kind, payload: out.append((node, kind, payload)))
    return out


def test_a_dead_verifier_is_lost_at_once_and_its_generations_move(
    db, sent, django_capture_on_commit_callbacks
):
    p, nodes = _pipeline(verifiers=2)
    v0, v1 = nodes["verify"]
    with django_capture_on_commit_callbacks(execute=True):
        gens = [_submit(p) for _ in range(4)]
    on_v0 = [g for g in gens if g.verifier_id == v0.pk]
    assert on_v0 and len(on_v0) < len(gens)  # least loaded: spread over both
    Generation.objects.filter(pk__in=[g.pk for g in gens]).update(state="running")
    wire.publish(on_v0[0].pk, wire.tokens_event([104], "h", 1), node=stream_owner(on_v0[0].pk))
    redis_clients.client().rpush(wire.round_key(v0.pk), '["drafts", {}]')  # a stale round
    sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        report = services.node_process_gone(node_ref=v0.name, reason="its worker was killed")

    assert sorted(report["rerouted"]) == sorted(str(g.pk) for g in on_v0)
    assert report["failed"] == []
    v0.refresh_from_db()
    assert v0.state == "lost"  # now, not after HEARTBEAT_PERIOD_S x TOLERANCE
    assert redis_clients.client().llen(wire.round_key(v0.pk)) == 0
    for g in on_v0:
        g.refresh_from_db()
        assert (g.state, g.verifier_id, g.attempts) == ("queued", v1.pk, 2)
        last = stream_of(g.pk)[-1][1]
        assert last["type"] == "requeued" and "killed" in last["reason"]
        (moved,) = g.route_events  # its timeline: which attempt left which pair, and why
        assert (moved["kind"], moved["attempt"], moved["verifier"]) == ("rerouted", 1, v0.pk)
        assert "killed" in moved["reason"]
        assert [e["kind"] for e in timeline(g)["events"]] == ["queued", "rerouted"]
    assert sorted(n for n, k, _ in sent if k == "start") == [v1.pk] * len(on_v0)
    untouched = Generation.objects.exclude(pk__in=[g.pk for g in on_v0])
    assert set(untouched.values_list("state", flat=True)) == {"running"}


def test_a_dead_drafter_degrades_its_generations_to_plain_decoding_on_their_verifier(
    db, sent, django_capture_on_commit_callbacks
):
    """Its verifier is healthy: nothing fails, nothing moves -- the row forgets the drafter,
    the verifier hears `drafter_lost` and finishes them by plain decoding (k=0); new requests
    go to the verifier alone while no drafter is healthy."""
    p, nodes = _pipeline(verifiers=1)
    drafter, verifier = nodes["draft"][0], nodes["verify"][0]
    with django_capture_on_commit_callbacks(execute=True):
        gens = [_submit(p) for _ in range(2)]
    Generation.objects.filter(pk=gens[0].pk).update(state="running")
    wire.publish(gens[0].pk, wire.tokens_event([104], "h", 1), node=verifier.pk)
    sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        report = services.node_process_gone(node_ref=str(drafter.pk), reason="its worker died")

    assert sorted(report["degraded"]) == sorted(str(g.pk) for g in gens)
    assert report["rerouted"] == report["failed"] == []
    for g, state in zip(gens, ("running", "queued"), strict=True):
        g.refresh_from_db()
        assert (g.state, g.drafter_id, g.verifier_id, g.attempts) == (state, None, verifier.pk, 1)
        assert g.error == "" and g.finished_at is None
        (lost,) = g.route_events
        assert (lost["kind"], lost["attempt"], lost["drafter"]) == ("degraded", 1, drafter.pk)
        types = {e["type"] for _, e in stream_of(g.pk)}
        assert not types & {"error", "done", "requeued"}, types
    assert [(n, k, m) for n, k, m in sent] == [
        (verifier.pk, "drafter_lost", {"drafter": drafter.pk})
    ] * 2
    # a new request: the verifier alone, marked degraded (its telemetry counts it)
    with django_capture_on_commit_callbacks(execute=True):
        fresh = _submit(p)
    assert (fresh.drafter_id, fresh.verifier_id) == (None, verifier.pk)
    (start,) = [m for n, k, m in sent if k == "start"]
    assert start["drafter"] is None and start["degraded"] is True
    # idempotent, and a node that does not exist has nothing to release
    assert services.node_process_gone(node_ref=drafter.name, reason="x") == {
        "rerouted": [],
        "degraded": [],
        "failed": [],
    }
    assert services.node_process_gone(node_ref="no-such-node", reason="x")["failed"] == []


def test_the_watchdog_degrades_a_lost_drafters_generations_and_reroutes_a_lost_verifiers(
    db, sent, django_capture_on_commit_callbacks
):
    p, nodes = _pipeline(verifiers=2)
    drafter = nodes["draft"][0]
    with django_capture_on_commit_callbacks(execute=True):
        gens = [_submit(p) for _ in range(2)]
    Node.objects.filter(pk=drafter.pk).update(state="lost")
    with django_capture_on_commit_callbacks(execute=True):
        report = services.generations_watchdog()
    assert sorted(report["degraded"]) == sorted(str(g.pk) for g in gens)
    # the verifier dies too: re-routed to the other verifier, plainly (no drafter left)
    g = gens[0]
    g.refresh_from_db()
    Node.objects.filter(pk=g.verifier_id).update(state="lost")
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        report = services.generations_watchdog()
    assert report["rerouted"] == [str(g.pk)] and report["failed"] == []
    (start,) = [m for n, k, m in sent if k == "start"]
    assert start["drafter"] is None and start["degraded"] is True and start["attempt"] == 2


def test_with_no_healthy_verifier_left_each_generation_ends_with_an_error_event(
    db, sent, django_capture_on_commit_callbacks
):
    p, nodes = _pipeline(verifiers=1)
    verifier = nodes["verify"][0]
    with django_capture_on_commit_callbacks(execute=True):
        gens = [_submit(p) for _ in range(2)]
    Generation.objects.filter(pk=gens[0].pk).update(state="running")

    with django_capture_on_commit_callbacks(execute=True):
        report = services.node_process_gone(node_ref=str(verifier.pk), reason="its worker died")

    assert sorted(report["failed"]) == sorted(str(g.pk) for g in gens)
    for g in gens:
        g.refresh_from_db()
        assert g.state == "failed" and g.finished_at is not None
        assert "verify-0 (verifier) is lost: its worker died" in g.error
        assert "no healthy verifier" in g.error
        last = stream_of(g.pk)[-1][1]
        assert last["type"] == "error" and "its worker died" in last["error"]


def test_a_registered_node_stays_registered(db, sent):
    p, nodes = _pipeline(verifiers=1)
    v = nodes["verify"][0]
    Node.objects.filter(pk=v.pk).update(state="registered")
    services.node_process_gone(node_ref=v.name, reason="was not running when Tandem started")
    v.refresh_from_db()
    assert v.state == "registered"


def test_a_second_rerouter_that_saw_the_old_attempt_changes_nothing(
    db, sent, django_capture_on_commit_callbacks
):
    """The supervisor and the control worker's watchdog both see the dead node: whichever
    comes second must not re-route the already moved generation again (away from its new,
    healthy verifier -- with none left, that failed it)."""
    p, nodes = _pipeline(verifiers=2)
    v0, v1 = nodes["verify"]
    with django_capture_on_commit_callbacks(execute=True):
        g = _submit(p)
    Generation.objects.filter(pk=g.pk).update(state="running", verifier=v0)
    stale = Generation.objects.get(pk=g.pk)  # what the watchdog's query returned
    with django_capture_on_commit_callbacks(execute=True):
        services.node_process_gone(node_ref=v0.name, reason="its worker was killed")
    with django_capture_on_commit_callbacks(execute=True):
        services.generation_reroute(generation=stale, reason="v0 is lost", attempt=1)
    g.refresh_from_db()
    assert (g.state, g.verifier_id, g.attempts, g.error) == ("queued", v1.pk, 2, "")
