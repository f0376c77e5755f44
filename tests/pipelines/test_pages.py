"""Pipeline pages: list, new, edit with the action controls; actions through forms."""

import pytest

from fleet.audit.models import AuditEvent
from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline
from tests.conftest import client_for
from tests.factories import online_node

pytestmark = pytest.mark.django_db


def test_the_pipeline_page_shows_operators_actions_revisions_and_audit(pipeline, operator, client):
    """One page per pipeline: live figures, and for operators its controls and history; the
    old operators' page (/edit) sends there."""
    client.force_login(operator)
    moved = client.get(f"/pipelines/{pipeline.pk}/edit")
    assert moved.status_code == 301 and moved["Location"] == f"/pipelines/{pipeline.pk}/"
    page = client.get(f"/pipelines/{pipeline.pk}/")
    assert page.status_code == 200
    for text in (
        b"Place a node",
        b"k policy",
        b"Swap draft model",
        b"Revisions",
        b"Audit log",
        b"gpu-v1",
    ):
        assert text in page.content


def test_form_actions(pipeline, operator, client):
    client.force_login(operator)
    free = online_node(name="free-1")
    r = client.post(
        f"/pipelines/{pipeline.pk}/act/place",
        {"node": free.pk, "role": "verify", "version": 1, "reason": "capacity"},
    )
    assert r.status_code == 302 and r["Location"] == f"/pipelines/{pipeline.pk}/"
    r = client.post(
        f"/pipelines/{pipeline.pk}/act/k_policy",
        {"mode": "table", "table": "1:6, 16:2", "version": 2, "next": f"/pipelines/{pipeline.pk}/"},
    )
    assert r["Location"] == f"/pipelines/{pipeline.pk}/"
    assert Pipeline.objects.get(pk=pipeline.pk).k_policy == {
        "mode": "table",
        "table": [[1, 6], [16, 2]],
    }
    client.post(f"/pipelines/{pipeline.pk}/act/drain", {"node": free.pk})
    assert Node.objects.get(pk=free.pk).state == "draining"
    client.post(f"/pipelines/{pipeline.pk}/act/return", {"node": free.pk})
    assert Node.objects.get(pk=free.pk).state == "online"
    client.post(f"/pipelines/{pipeline.pk}/act/rollback", {"to_version": 1})
    assert Pipeline.objects.get(pk=pipeline.pk).k_policy == {"mode": "fixed", "k": 4}
    assert [e.action for e in AuditEvent.objects.order_by("id")] == [
        "place",
        "set_k_policy",
        "drain",
        "return",
        "rollback",
    ]


def test_refusals_are_messages_not_errors(pipeline, operator, client):
    client.force_login(operator)
    r = client.post(
        f"/pipelines/{pipeline.pk}/act/k_policy", {"mode": "fixed", "k": "99"}, follow=True
    )
    assert r.status_code == 200 and b"Refused" in r.content
    stale = client.post(
        f"/pipelines/{pipeline.pk}/act/configure",
        {"max_verify_batch": "8", "version": "9"},
        follow=True,
    )
    assert b"Refused" in stale.content and b"version" in stale.content
    verifier = pipeline.placements.get(role="verify").node
    last = client.post(f"/pipelines/{pipeline.pk}/act/drain", {"node": verifier.pk}, follow=True)
    assert b"last healthy verifier" in last.content
    assert client.post(f"/pipelines/{pipeline.pk}/act/explode", {}).status_code == 404
    assert (
        client.post(
            f"/pipelines/{pipeline.pk}/act/next", {"next": "https://evil.example/"}
        ).status_code
        == 404
    )


def test_offsite_next_is_ignored(pipeline, operator, client):
    client.force_login(operator)
    r = client.post(
        f"/pipelines/{pipeline.pk}/act/k_policy",
        {"mode": "fixed", "k": "2", "next": "https://evil.example/x"},
    )
    assert r["Location"] == f"/pipelines/{pipeline.pk}/"


def test_new_pipeline_form(operator, client):
    client.force_login(operator)
    r = client.post(
        "/pipelines/new",
        {
            "name": "fresh",
            "target_model": "t-8b",
            "drafter_kind": "model",
            "draft_model": "d-1b",
            "k": "3",
            "max_verify_batch": "16",
            "max_batch_wait_ms": "5",
        },
    )
    assert r.status_code == 302
    p = Pipeline.objects.get(name="fresh")
    assert p.k_policy == {"mode": "fixed", "k": 3}
    bad = client.post(
        "/pipelines/new",
        {
            "name": "fresh2",
            "target_model": "t",
            "drafter_kind": "model",
            "draft_model": "",
            "k": "3",
            "max_verify_batch": "16",
            "max_batch_wait_ms": "5",
        },
    )
    assert bad.status_code == 200 and b"draft model is required" in bad.content


def test_console_pipeline_page_has_the_controls_for_operators_only(
    pipeline, operator, viewer, client
):
    client.force_login(operator)
    assert b"Place a node" in client.get(f"/pipelines/{pipeline.pk}/").content
    client.force_login(viewer)
    page = client.get(f"/pipelines/{pipeline.pk}/")
    assert page.status_code == 200 and b"Place a node" not in page.content
    assert b"Audit log" not in page.content and b"Roll back" not in page.content


def test_auto_mode_and_bounds_from_the_form(pipeline, operator, client):
    client.force_login(operator)
    client.post(
        f"/pipelines/{pipeline.pk}/act/configure",
        {
            "auto_mode_present": "1",
            "auto_mode": "on",
            "auto_bounds_present": "1",
            "auto_k_min": "1",
            "auto_k_max": "5",
            "auto_min_interval_s": "120",
            "auto_hysteresis": "",
            "auto_allow_split": "on",
        },
    )
    p = Pipeline.objects.get(pk=pipeline.pk)
    assert p.auto_mode and p.auto_bounds == {
        "k_min": 1,
        "k_max": 5,
        "min_interval_s": 120.0,
        "allow_split": True,
    }
    bad = client.post(
        f"/pipelines/{pipeline.pk}/act/configure",
        {"auto_bounds_present": "1", "auto_k_min": "6", "auto_k_max": "2"},
        follow=True,
    )
    assert b"k_min must not exceed k_max" in bad.content


@pytest.mark.parametrize(
    "field,value",
    [("version", "abc"), ("reason", "x" * 2001), ("max_verify_batch", "5000")],
)
def test_pages_refuse_what_the_api_refuses(pipeline, operator, client, field, value):
    """A page POST is validated by the API's serializer: what the REST call refuses with 400
    (a version that is not a number, an over-long reason, a cap out of range) the page
    refuses too, naming the field, and changes nothing."""
    client.force_login(operator)
    body = {"max_verify_batch": "8", "version": "1", field: value}
    page = client.post(f"/pipelines/{pipeline.pk}/act/configure", body, follow=True)
    assert b"Refused: " + field.encode() in page.content
    rest = client_for(operator).patch(f"/api/v1/pipelines/{pipeline.pk}", body, format="json")
    assert rest.status_code == 400 and field in rest.json()
    assert Pipeline.objects.get(pk=pipeline.pk).version == 1
