"""Without starting `up`: vLLM's probes (/health, /ping, /version) answer without login and
follow the pipelines' health; a pipeline still preparing its models answers 503 +
Retry-After with what it waits for, in the OpenAI error format."""

from __future__ import annotations

import pytest
from django.test import Client

from fleet.pipelines.models import Pipeline
from inference import warmup
from tests.serving.conftest import model_path, pipeline, place_pair  # noqa: F401

pytestmark = pytest.mark.django_db


def test_health_is_503_until_a_pipeline_can_serve_and_healthz_stays(pipeline):  # noqa: F811
    client = Client()
    assert client.get("/healthz").status_code == 200  # the control plane alone
    response = client.get("/health")
    assert response.status_code == 503 and response.json()["checks"]["pipeline"] is False
    assert client.post("/ping").status_code == 503

    place_pair(pipeline)
    assert client.get("/health").status_code == 200
    assert client.get("/ping").status_code == 200
    assert client.post("/ping").status_code == 200
    assert client.post("/health").status_code == 405


def test_version_as_vllm_answers_it():
    response = Client().get("/version")
    assert response.status_code == 200 and response.json()["version"]


@pytest.fixture
def warming(db, tmp_path):
    """A pipeline whose model files are being made: no model directory yet, a warm-up."""
    p = Pipeline.objects.create(name="warming", target_model=str(tmp_path / "absent"))
    warmup.warmup_publish(pipeline=p.name, waiting_for="training the pair", progress=0.25, eta_s=30)
    yield p
    warmup.warmup_clear(pipeline=p.name)


def _chat(as_persona, model: str):
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return as_persona("operator").post("/v1/chat/completions", body, format="json")


def test_a_warming_pipeline_answers_503_with_retry_after_and_why(warming, as_persona):
    response = _chat(as_persona, "warming")
    assert response.status_code == 503
    assert response["Retry-After"] == "30"
    error = response.json()["error"]
    assert error["code"] == "model_not_ready" and error["type"] == "server_error"
    assert "training the pair (25% done, about 30 s left)" in error["message"]


def test_missing_model_files_without_a_warmup_keep_their_400(warming, as_persona):
    warmup.warmup_clear(pipeline=warming.name)
    response = _chat(as_persona, "warming")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "model_not_available"


def test_no_healthy_pair_is_503_with_retry_after(pipeline, as_persona):  # noqa: F811
    response = _chat(as_persona, "demo")
    assert response.status_code == 503 and int(response["Retry-After"]) >= 1
    assert response.json()["error"]["code"] == "no_capacity"


def _rest(as_persona, name: str):
    body = {"pipeline": name, "prompt": "hi"}
    return as_persona("operator").post("/api/v1/generations", body, format="json")


def test_the_rest_api_answers_a_warming_pipeline_503_with_retry_after(warming, as_persona):
    response = _rest(as_persona, "warming")
    assert response.status_code == 503 and response["Retry-After"] == "30"
    assert "training the pair (25% done, about 30 s left)" in response.json()["detail"]
    warmup.warmup_clear(pipeline=warming.name)
    missing = _rest(as_persona, "warming")  # no warm-up: a 400 that names no server path
    assert missing.status_code == 400
    assert str(warming.target_model) not in missing.content.decode()


def test_the_rest_api_answers_no_healthy_pair_503_with_retry_after(pipeline, as_persona):  # noqa: F811
    response = _rest(as_persona, "demo")
    assert response.status_code == 503 and int(response["Retry-After"]) >= 1


def test_the_console_shows_a_warmup_until_the_pipeline_serves(warming, viewer):
    client = Client()
    client.force_login(viewer)
    page = client.get("/pipelines/").content.decode()
    assert "warming up" in page and "training the pair (25% done" in page
    assert "Warming up" in client.get("/").content.decode()
    assert "training the pair" in client.get(f"/pipelines/{warming.pk}/").content.decode()
    place_pair(warming)
    assert "warming up" not in client.get("/pipelines/").content.decode()
