import pytest
from django.conf import settings

from fleet.celery import app, ping


def test_healthz_reports_database_and_redis(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": True, "redis": True}}


def test_broker_is_json_only():
    assert settings.CELERY_ACCEPT_CONTENT == ["json"]
    assert app.conf.task_serializer == "json"


@pytest.mark.slow
def test_celery_ping_through_real_worker_and_broker():
    from celery.contrib.testing.worker import start_worker

    with start_worker(app, pool="solo", perform_ping_check=False, loglevel="WARNING"):
        assert ping.delay().get(timeout=20) == "pong"
