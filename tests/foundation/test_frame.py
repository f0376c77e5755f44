import os
import signal
import subprocess
import sys
import uuid

import pytest
from django.conf import settings

from fleet.celery import app, ping
from tests.foundation.helpers import REPO, free_port


def test_healthz_reports_database_and_redis(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": True, "redis": True}}


def test_healthz_is_503_when_redis_is_unreachable(client, db, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"status": "degraded", "checks": {"database": True, "redis": False}}


def test_broker_is_json_only():
    assert settings.CELERY_ACCEPT_CONTENT == ["json"]
    assert app.conf.task_serializer == "json"
    assert app.conf.result_serializer == "json"


@pytest.mark.slow
def test_celery_ping_through_a_real_worker_process_and_the_real_broker():
    """`celery -A fleet worker` as its own process, on the test run's (embedded) Redis."""
    queue = f"test-{uuid.uuid4().hex[:8]}"  # ours alone, whatever else runs on this broker
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "fleet",
            "worker",
            "--pool=solo",
            f"--queues={queue}",
            f"--hostname={queue}@%h",
            "--without-gossip",
            "--without-mingle",
            "--loglevel=WARNING",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )
    try:
        assert ping.apply_async(queue=queue).get(timeout=60) == "pong"
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    assert worker.returncode == 0
