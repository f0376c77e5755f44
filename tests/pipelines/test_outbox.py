"""Configuration pushes go through an outbox: a change made while Redis is unreachable is
committed with its push recorded, answers 202 saying the push is pending (never 500), and
the push reaches the nodes' lists once Redis is back."""

from __future__ import annotations

import logging

import pytest

from fleet.audit.models import AuditEvent
from fleet.logs import Throttled
from fleet.pipelines import outbox, tasks
from fleet.pipelines.models import ConfigPush, Pipeline
from inference import wire
from tests.foundation.helpers import free_port

# transaction=True: the after-commit pushes really run; the migrations' profiles come back
pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


@pytest.fixture
def outage(settings):
    """`down()`: every Redis client of this process points at a dead port; `back()`: at the
    test Redis again."""
    live = settings.REDIS_URL

    class Outage:
        @staticmethod
        def down():
            settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"

        @staticmethod
        def back():
            settings.REDIS_URL = live

    return Outage


def _configs(node_id: int) -> list[dict]:
    return [p for kind, p in wire.receive(node_id, timeout_s=0.2) if kind == "config"]


def test_a_patch_during_an_outage_is_202_and_its_push_is_delivered_later(
    pipeline, as_persona, outage
):
    client = as_persona("operator")
    node_ids = list(pipeline.placements.values_list("node_id", flat=True))
    for node_id in node_ids:
        _configs(node_id)  # empty the lists
    outage.down()
    response = client.patch(
        f"/api/v1/pipelines/{pipeline.pk}", {"max_verify_batch": 17}, format="json"
    )
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["version"] == 2 and body["max_verify_batch"] == 17
    assert body["config_push"]["state"] == "pending"
    assert "committed" in body["config_push"]["detail"]
    assert Pipeline.objects.get(pk=pipeline.pk).max_verify_batch == 17
    assert AuditEvent.objects.filter(pipeline=pipeline, action="update").exists()
    (push,) = ConfigPush.objects.filter(pipeline=pipeline)
    assert push.node_ids is None and push.attempts == 1 and "Error" in push.last_error

    assert tasks.deliver_pushes() == {"delivered": 0, "pending": 1}  # still down: kept
    outage.back()
    assert tasks.deliver_pushes() == {"delivered": 1, "pending": 0}
    for node_id in node_ids:
        (config,) = _configs(node_id)
        assert config["version"] == 2 and config["config"]["max_verify_batch"] == 17
    assert not ConfigPush.objects.exists()


def test_a_node_action_during_an_outage_is_202_too(pipeline, as_persona, outage):
    client = as_persona("operator")
    drafter = pipeline.placements.get(role="draft").node_id
    outage.down()
    response = client.post(
        f"/api/v1/pipelines/{pipeline.pk}/nodes/{drafter}/drain", {"force": True}, format="json"
    )
    assert response.status_code == 202, response.content
    assert response.json()["config_push"]["state"] == "pending"
    (push,) = ConfigPush.objects.all()
    assert push.node_ids is None  # every worker of the pipeline (peers travel with it)
    outage.back()
    _configs(drafter)
    assert outbox.deliver_pending() == {"delivered": 1, "pending": 0}
    (config,) = _configs(drafter)
    assert config["pipeline"] == pipeline.pk


def test_a_delivered_push_leaves_nothing_and_answers_200(pipeline, as_persona, outage):
    client = as_persona("operator")
    response = client.patch(
        f"/api/v1/pipelines/{pipeline.pk}", {"max_verify_batch": 9}, format="json"
    )
    assert response.status_code == 200 and "config_push" not in response.json()
    assert not ConfigPush.objects.exists()


@pytest.mark.django_db(transaction=False)
def test_repeated_identical_errors_are_logged_once_then_summarised(caplog):
    now = [0.0]
    throttled = Throttled(logging.getLogger("t"), every_s=30, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="t"):
        for i in range(100):
            now[0] = i * 0.5  # 50 s of an error twice a second
            throttled.warning("redis down: %s", f"port {i}")
        throttled.warning("another message")
        throttled.clear("redis back")
        throttled.warning("redis down: %s", "again")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "redis down: port 0",
        "redis down: port 60 (59 more like this in the last 30s)",
        "another message",
        "redis back",
        "redis down: again",
    ]
