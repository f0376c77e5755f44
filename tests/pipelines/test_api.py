"""REST of pipelines: list/retrieve/create/patch, actions; 400/403/404/409."""

from __future__ import annotations

import pytest

from fleet.audit.models import AuditEvent
from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline, Placement
from tests.factories import make_pipeline, online_node, place

pytestmark = pytest.mark.django_db


def test_list_and_retrieve_for_viewers(pipeline, as_persona):
    client = as_persona("viewer")
    body = client.get("/api/v1/pipelines").json()
    assert body["count"] == 1
    row = body["results"][0]
    assert row["name"] == "main" and row["version"] == 1
    assert {p["role"] for p in row["placements"]} == {"draft", "verify"}
    response = client.get(f"/api/v1/pipelines/{pipeline.pk}")
    assert response.status_code == 200 and response["ETag"] == '"1"'
    assert client.get("/api/v1/pipelines/999999").status_code == 404


def test_list_query_count_is_constant(pipeline, as_persona, django_assert_max_num_queries):
    for i in range(5):
        p = make_pipeline(name=f"more-{i}")
        place(p, online_node(), "verify")
    client = as_persona("viewer")
    with django_assert_max_num_queries(8):
        assert client.get("/api/v1/pipelines").status_code == 200


def test_create_and_field_errors(as_persona):
    client = as_persona("operator")
    response = client.post(
        "/api/v1/pipelines",
        {
            "name": "new-one",
            "target_model": "t-8b",
            "draft_model": "d-1b",
            "k_policy": {"mode": "table", "table": [[4, 4], [64, 1]]},
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["k_policy"] == {"mode": "table", "table": [[4, 4], [64, 1]]}
    assert AuditEvent.objects.get(action="create").actor_label == "bob"
    bad = client.post("/api/v1/pipelines", {"name": "x y", "max_verify_batch": 0}, format="json")
    assert bad.status_code == 400
    assert {"name", "max_verify_batch"} <= set(bad.json())
    missing = client.post("/api/v1/pipelines", {"name": "ok"}, format="json")
    assert missing.status_code == 400 and "target_model" in missing.json()
    policy = client.post(
        "/api/v1/pipelines",
        {
            "name": "p2",
            "target_model": "t",
            "draft_model": "d",
            "k_policy": {"mode": "fixed", "k": 40},
        },
        format="json",
    )
    assert policy.status_code == 400 and "k_policy" in policy.json()
    dup = client.post(
        "/api/v1/pipelines",
        {"name": "new-one", "target_model": "t", "draft_model": "d"},
        format="json",
    )
    assert dup.status_code == 400 and "name" in dup.json()


def test_patch_is_version_checked(pipeline, as_persona):
    client = as_persona("operator")
    url = f"/api/v1/pipelines/{pipeline.pk}"
    ok = client.patch(
        url, {"max_verify_batch": 16, "version": 1, "reason": "latency"}, format="json"
    )
    assert ok.status_code == 200 and ok.json()["version"] == 2
    stale = client.patch(url, {"max_verify_batch": 8, "version": 1}, format="json")
    assert stale.status_code == 409
    assert "version 2" in stale.json()["detail"]
    stale_header = client.patch(url, {"max_verify_batch": 8}, format="json", HTTP_IF_MATCH='"1"')
    assert stale_header.status_code == 409
    fresh_header = client.patch(url, {"max_verify_batch": 8}, format="json", HTTP_IF_MATCH='W/"2"')
    assert fresh_header.status_code == 200
    assert client.patch(url, {"name": "renamed"}, format="json").status_code == 400
    assert client.patch(url, {"max_verify_batch": "many"}, format="json").status_code == 400
    assert Pipeline.objects.get(pk=pipeline.pk).max_verify_batch == 8


def test_actions(pipeline, as_persona):
    client = as_persona("operator")
    base = f"/api/v1/pipelines/{pipeline.pk}"
    node = online_node()
    r = client.post(
        f"{base}/place", {"node": node.pk, "role": "verify", "version": 1}, format="json"
    )
    assert r.status_code == 200, r.content
    assert r.json()["version"] == 2
    r = client.post(
        f"{base}/k-policy", {"k_policy": {"mode": "fixed", "k": 3}, "version": 2}, format="json"
    )
    assert r.status_code == 200 and r.json()["k_policy"]["k"] == 3
    r = client.post(f"{base}/batch-caps", {"max_verify_batch": 48}, format="json")
    assert r.status_code == 200 and r.json()["max_verify_batch"] == 48
    r = client.post(f"{base}/nodes/{node.pk}/drain", {"reason": "maint"}, format="json")
    assert r.status_code == 200 and Node.objects.get(pk=node.pk).state == "draining"
    r = client.post(f"{base}/nodes/{node.pk}/return", {}, format="json")
    assert r.status_code == 200 and Node.objects.get(pk=node.pk).state == "online"
    other = make_pipeline(name="other")
    r = client.post(f"{base}/nodes/{node.pk}/move", {"to_pipeline": other.pk}, format="json")
    assert r.status_code == 200 and r.json()["name"] == "other"
    assert Placement.objects.get(node=node).pipeline == other
    r = client.post(f"{base}/swap-draft", {"drafter_kind": "ngram"}, format="json")
    assert r.status_code == 200 and r.json()["drafter_kind"] == "ngram"
    r = client.post(f"{base}/rollback", {"to_version": 1}, format="json")
    assert r.status_code == 200 and r.json()["k_policy"] == {"mode": "fixed", "k": 4}
    audit = client.get(f"{base}/audit").json()
    assert [e["action"] for e in audit["results"]][:2] == ["rollback", "swap_draft"]
    revisions = client.get(f"{base}/revisions").json()
    assert revisions["results"][0]["version"] == Pipeline.objects.get(pk=pipeline.pk).version


def test_action_errors(pipeline, as_persona):
    client = as_persona("operator")
    base = f"/api/v1/pipelines/{pipeline.pk}"
    verifier = pipeline.placements.get(role="verify").node
    sram = online_node(profile="d-matrix-corsair", roles=("draft",))
    assert (
        client.post(f"{base}/place", {"node": sram.pk, "role": "verify"}, format="json").status_code
        == 400
    )
    assert (
        client.post(f"{base}/place", {"node": sram.pk, "role": "boss"}, format="json").status_code
        == 400
    )
    assert (
        client.post(
            f"{base}/place", {"node": sram.pk, "role": "draft", "version": 9}, format="json"
        ).status_code
        == 409
    )
    last = client.post(f"{base}/nodes/{verifier.pk}/drain", {}, format="json")
    assert last.status_code == 409 and "last healthy verifier" in last.json()["detail"]
    forced = client.post(f"{base}/nodes/{verifier.pk}/drain", {"force": True}, format="json")
    assert forced.status_code == 200
    assert client.post(f"{base}/nodes/{sram.pk}/drain", {}, format="json").status_code == 404
    assert (
        client.post(
            "/api/v1/pipelines/999999/k-policy",
            {"k_policy": {"mode": "fixed", "k": 1}},
            format="json",
        ).status_code
        == 404
    )
    assert client.post(f"{base}/rollback", {"to_version": 50}, format="json").status_code == 400
    assert client.post(f"{base}/k-policy", {"k_policy": "four"}, format="json").status_code == 400
    assert (
        client.post(
            f"{base}/nodes/{verifier.pk}/move", {"to_pipeline": 999999}, format="json"
        ).status_code
        == 404
    )


def test_viewer_cannot_act(pipeline, as_persona):
    client = as_persona("viewer")
    r = client.post(
        f"/api/v1/pipelines/{pipeline.pk}/k-policy",
        {"k_policy": {"mode": "fixed", "k": 1}},
        format="json",
    )
    assert r.status_code == 403
    assert (
        client.patch(
            f"/api/v1/pipelines/{pipeline.pk}", {"max_verify_batch": 2}, format="json"
        ).status_code
        == 403
    )
    assert Pipeline.objects.get(pk=pipeline.pk).version == 1


def test_schema_of_pipelines_and_planner_generates_without_warnings():
    from django.urls import include, path
    from drf_spectacular.drainage import GENERATOR_STATS
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.validation import validate_schema

    GENERATOR_STATS.reset()
    patterns = [
        path("api/v1/", include("fleet.pipelines.urls_api")),
        path("api/v1/", include("fleet.planner.urls_api")),
    ]
    schema = SchemaGenerator(patterns=patterns).get_schema(request=None, public=True)
    validate_schema(schema)
    assert not GENERATOR_STATS, (GENERATOR_STATS._warn_cache, GENERATOR_STATS._error_cache)
    assert "/api/v1/pipelines/{id}/nodes/{node_id}/drain" in schema["paths"]
    assert "/api/v1/planner/what-if" in schema["paths"]
