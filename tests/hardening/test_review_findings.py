"""Findings of the session's security review: a CSRF failure on an API path answers JSON,
and a non-ASCII bearer token on /metrics is refused (it raised in compare_digest: a 500)."""

from django.test import Client

from inference.models import Generation


def test_a_csrf_failure_on_an_api_path_answers_json(world, admin):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin)
    generation: Generation = world["generation"]
    response = client.post(f"/api/v1/generations/{generation.id}/stream")
    assert response.status_code == 403
    assert response["Content-Type"] == "application/json"
    assert "CSRF" in response.json()["detail"]
    page = client.post("/logout/")
    assert page.status_code == 403 and page["Content-Type"].startswith("text/html")


def test_a_non_ascii_bearer_token_on_metrics_is_refused(db, monkeypatch):
    monkeypatch.setenv("TANDEM_METRICS_TOKEN", "s3cret-scrape-token")
    remote = Client(REMOTE_ADDR="10.0.0.9", raise_request_exception=False)
    response = remote.get("/metrics", HTTP_AUTHORIZATION="Bearer s3crét-scrape-tokén")
    assert response.status_code == 401
