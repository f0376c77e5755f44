"""REST of learning from traffic: who may read and change what; pairs' tokens only for
those who may read the generation's content; bad input is a 400, never a 500."""

from __future__ import annotations

import pytest

from fleet.audit.models import AuditEvent
from inference.learning import services
from inference.learning.models import CapturedPair, DraftVersion
from tests.conftest import client_for


def url(pipeline, what):
    return f"/api/v1/pipelines/{pipeline.pk}/{what}"


@pytest.mark.parametrize(
    "persona,read,write", [("outsider", 403, 403), ("viewer", 200, 403), ("operator", 200, 200)]
)
def test_who_may_read_and_switch_learning(learning, personas, persona, read, write):
    client = client_for(personas[persona])
    assert client.get(url(learning, "learning")).status_code == read
    assert client.get(url(learning, "draft-versions")).status_code == read
    assert client.get(url(learning, "captured-pairs")).status_code == read
    r = client.patch(url(learning, "learning"), {"enabled": True, "reason": "go"}, format="json")
    assert r.status_code == write
    if write == 200:
        assert r.json()["enabled"] is True
        assert AuditEvent.objects.filter(pipeline=learning, action="learning").count() == 1


def test_anonymous_is_refused(api, learning):
    assert api.get(url(learning, "learning")).status_code in (401, 403)


@pytest.mark.parametrize(
    "body",
    [{"canary_fraction": 2}, {"retention_hours": 0}, {"enabled": "maybe"}, {"min_pairs": "x"}],
)
def test_bad_settings_are_a_400(learning, operator, body):
    r = client_for(operator).patch(url(learning, "learning"), body, format="json")
    assert r.status_code == 400, r.content


def test_pairs_show_tokens_only_to_those_who_may_read_content(learning, personas, settings):
    settings.CONTENT_ROLE = "admin"
    mine = CapturedPair.objects.create(
        pipeline=learning, user=personas["operator"], prompt_tokens=[1, 2], output_tokens=[3]
    )
    CapturedPair.objects.create(pipeline=learning, prompt_tokens=[7], output_tokens=[8, 9])

    def seen(persona):
        rows = client_for(personas[persona]).get(url(learning, "captured-pairs")).json()
        return {r["id"]: (r["prompt_tokens"], r["output_token_count"]) for r in rows["results"]}

    viewer = seen("viewer")
    assert set(viewer.values()) == {(None, 1), (None, 2)}  # counts, never tokens
    operator = seen("operator")
    assert operator[mine.pk] == ([1, 2], 1) and sum(v[0] is None for v in operator.values()) == 1
    assert all(v[0] is not None for v in seen("admin").values())


def test_versions_are_listed_and_an_operator_may_start_one(learning, operator, viewer, monkeypatch):
    monkeypatch.setattr(services, "_enqueue", lambda pk: None)
    services.learning_configure(pipeline_id=learning.pk, actor=operator, changes={"enabled": True})
    assert client_for(viewer).post(url(learning, "draft-versions")).status_code == 403
    r = client_for(operator).post(url(learning, "draft-versions"))
    assert r.status_code == 202 and r.json()["number"] == 1 and r.json()["status"] == "training"
    again = client_for(operator).post(url(learning, "draft-versions"))
    assert again.status_code == 400 and "training" in again.content.decode()
    DraftVersion.objects.filter(number=1).update(status="rejected", canary_acceptance=0.3)
    rows = client_for(viewer).get(url(learning, "draft-versions")).json()["results"]
    assert rows[0]["number"] == 1 and rows[0]["canary_acceptance"] == 0.3


def test_an_unknown_pipeline_is_a_404(learning, operator):
    client = client_for(operator)
    assert client.get("/api/v1/pipelines/9999/learning").status_code == 404
    assert client.patch("/api/v1/pipelines/9999/learning", {}, format="json").status_code == 404


def test_schema_of_learning_generates_without_warnings():
    from django.urls import include, path
    from drf_spectacular.drainage import GENERATOR_STATS
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.validation import validate_schema

    GENERATOR_STATS.reset()
    patterns = [path("api/v1/", include("inference.learning.urls_api"))]
    schema = SchemaGenerator(patterns=patterns).get_schema(request=None, public=True)
    validate_schema(schema)
    assert not GENERATOR_STATS, (GENERATOR_STATS._warn_cache, GENERATOR_STATS._error_cache)
    assert {"get", "patch"} <= set(schema["paths"]["/api/v1/pipelines/{id}/learning"])
    assert "post" in schema["paths"]["/api/v1/pipelines/{id}/draft-versions"]
