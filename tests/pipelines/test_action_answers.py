"""Node actions (place, move, drain, return, unplace) answer compactly: the pipeline's id,
name and new version, the node and its placement; never the pipeline's every placement. They
cost the same queries whatever the pipeline's size, and keep the healthy-pair and power rules
(now counted in the database)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.audit.models import AuditEvent
from fleet.nodes.models import HardwareProfile, Node
from fleet.pipelines.models import Pipeline, Placement
from tests.conftest import client_for
from tests.factories import make_pipeline, online_node, place

pytestmark = pytest.mark.django_db


@pytest.fixture
def bob(operator):
    return client_for(operator)


def grow(pipeline: Pipeline, n: int, *, role: str = "verify", prefix: str = "bulk") -> None:
    """`n` more online nodes placed in `pipeline`, in bulk."""
    h100 = HardwareProfile.objects.get(slug="h100-sxm")
    now = timezone.now()
    nodes = Node.objects.bulk_create(
        Node(
            name=f"{prefix}-{pipeline.pk}-{i}",
            profile=h100,
            roles=["draft", "verify"],
            state="online",
            last_seen=now,
        )
        for i in range(n)
    )
    if not all(n.pk for n in nodes):  # backends that do not return ids
        nodes = list(Node.objects.filter(name__startswith=f"{prefix}-{pipeline.pk}-"))
    Placement.objects.bulk_create(Placement(pipeline=pipeline, node=n, role=role) for n in nodes)


def test_move_answers_the_placement_and_both_versions(pipeline, bob):
    other = make_pipeline(name="other")
    grow(pipeline, 40)
    node = Placement.objects.filter(pipeline=pipeline, role="verify").order_by("pk")[0].node
    r = bob.post(
        f"/api/v1/pipelines/{pipeline.pk}/nodes/{node.pk}/move",
        {"to_pipeline": other.pk, "version": 1},
        format="json",
    )
    assert r.status_code == 200, r.content
    body = r.json()
    assert set(body) == {"id", "name", "version", "node", "placement", "from_pipeline"}
    assert (body["id"], body["name"], body["version"]) == (other.pk, "other", 2)
    assert r["ETag"] == '"2"'
    assert body["from_pipeline"] == {"id": pipeline.pk, "name": "main", "version": 2}
    assert body["node"] == {"id": node.pk, "name": node.name, "state": "online", "version": 1}
    assert body["placement"]["role"] == "verify" and body["placement"]["node"] == node.pk
    assert body["placement"]["profile"] == "h100-sxm"
    assert len(r.content) < 1000  # the pipeline's 41 placements are not in it


def test_drain_return_unplace_and_place_answer_the_same_shape(pipeline, bob):
    extra = online_node()
    place(pipeline, extra, "verify")
    base = f"/api/v1/pipelines/{pipeline.pk}/nodes/{extra.pk}"
    drained = bob.post(f"{base}/drain", {}, format="json").json()
    assert drained["version"] == 2 and drained["node"]["state"] == "draining"
    assert drained["placement"]["node_state"] == "draining" and "from_pipeline" not in drained
    returned = bob.post(f"{base}/return", {}, format="json").json()
    assert returned["version"] == 3 and returned["node"]["state"] == "online"
    unplaced = bob.post(f"{base}/unplace", {}, format="json").json()
    assert unplaced["version"] == 4 and unplaced["placement"] is None
    placed = bob.post(
        f"/api/v1/pipelines/{pipeline.pk}/place", {"node": extra.pk, "role": "draft"}, format="json"
    ).json()
    assert placed["version"] == 5 and placed["placement"]["role"] == "draft"
    # a role change inside the pipeline: the answer has the new version too
    switched = bob.post(
        f"/api/v1/pipelines/{pipeline.pk}/place",
        {"node": extra.pk, "role": "verify"},
        format="json",
    )
    assert switched.json()["version"] == 6 and switched["ETag"] == '"6"'
    assert switched.json()["placement"]["role"] == "verify"
    assert [e.action for e in AuditEvent.objects.order_by("id")] == [
        "drain",
        "return",
        "unplace",
        "place",
        "place",
    ]


def test_node_actions_cost_the_same_queries_at_any_pipeline_size(pipeline, bob):
    other = make_pipeline(name="other")
    place(other, online_node(), "verify")

    def move_and_drain(prefix: str) -> int:
        node = online_node(name=f"{prefix}-mover")
        place(pipeline, node, "verify")
        url = f"/api/v1/pipelines/{pipeline.pk}/nodes/{node.pk}"
        with CaptureQueriesContext(connection) as ctx:
            assert bob.post(f"{url}/drain", {}, format="json").status_code == 200
            assert bob.post(f"{url}/return", {}, format="json").status_code == 200
            moved = bob.post(f"{url}/move", {"to_pipeline": other.pk}, format="json")
            assert moved.status_code == 200
        n = len(ctx.captured_queries)
        bob.post(f"/api/v1/pipelines/{other.pk}/nodes/{node.pk}/unplace", {}, format="json")
        return n

    move_and_drain("warm")  # the persona's first request looks up more
    small = move_and_drain("small")
    grow(pipeline, 150)
    grow(other, 150, prefix="other")
    assert move_and_drain("large") == small


def test_the_last_healthy_verifier_counts_only_fresh_online_nodes(pipeline, bob):
    """The healthy-pair rule, counted in the database: a draining, lost, or silent (last
    heartbeat past the liveness window) verifier is no second verifier."""
    verifier = pipeline.placements.get(role="verify").node
    stale = timezone.now() - Node.liveness_window() - timedelta(seconds=5)
    for name, fields in (
        ("draining", {"state": "draining"}),
        ("lost", {"state": "lost"}),
        ("silent", {"last_seen": stale}),
    ):
        other = online_node(name=f"v-{name}")
        Node.objects.filter(pk=other.pk).update(**fields)
        place(pipeline, other, "verify")
    url = f"/api/v1/pipelines/{pipeline.pk}/nodes/{verifier.pk}/drain"
    refused = bob.post(url, {}, format="json")
    assert refused.status_code == 409 and "last healthy verifier" in refused.json()["detail"]
    never_reported = online_node(name="v-new")
    Node.objects.filter(pk=never_reported.pk).update(last_seen=None)
    place(pipeline, never_reported, "verify")
    assert bob.post(url, {}, format="json").status_code == 200


def test_the_power_budget_is_summed_in_the_database(pipeline, bob):
    other = make_pipeline(name="capped", power_budget_w=1500)  # two H100s at 700 W fit
    place(other, online_node(name="cap-v1"), "verify")
    place(other, online_node(name="cap-v2"), "verify")
    mover = online_node(name="mover")
    place(pipeline, mover, "verify")
    r = bob.post(
        f"/api/v1/pipelines/{pipeline.pk}/nodes/{mover.pk}/move",
        {"to_pipeline": other.pk},
        format="json",
    )
    assert r.status_code == 400 and "2100 W" in r.json()["power_budget_w"][0]
    Node.objects.filter(name="cap-v2").update(state="retired")  # retired nodes draw nothing
    assert (
        bob.post(
            f"/api/v1/pipelines/{pipeline.pk}/nodes/{mover.pk}/move",
            {"to_pipeline": other.pk},
            format="json",
        ).status_code
        == 200
    )
