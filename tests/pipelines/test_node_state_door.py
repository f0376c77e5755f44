"""One door for draining and returning a node: `/api/v1/nodes/<id>/drain|return` goes through
the audited pipeline services, like the pipeline actions (healthy-pair check, audit row,
pipeline version bump, config pushed to the workers after commit)."""

from __future__ import annotations

import pytest

from fleet.audit.models import AuditEvent
from fleet.nodes.models import Node
from fleet.pipelines import outbox
from fleet.pipelines.models import Pipeline
from tests.conftest import client_for
from tests.factories import online_node, place

pytestmark = pytest.mark.django_db


@pytest.fixture
def pushed(monkeypatch):
    calls = []
    monkeypatch.setattr(
        outbox,
        "push_config",  # a pipeline id (every worker), or (pipeline id, the nodes pushed to)
        lambda pid, node_ids=None: calls.append(pid if node_ids is None else (pid, *node_ids)),
    )
    return calls


def test_the_node_endpoint_keeps_the_last_healthy_verifier_unless_forced(pipeline, operator):
    verifier = pipeline.placements.get(role="verify").node
    bob = client_for(operator)
    response = bob.post(f"/api/v1/nodes/{verifier.pk}/drain")
    assert response.status_code == 409
    assert "last healthy verifier" in response.json()["detail"]
    assert Node.objects.get(pk=verifier.pk).state == "online"
    assert not AuditEvent.objects.exists()
    forced = bob.post(
        f"/api/v1/nodes/{verifier.pk}/drain", {"force": True, "reason": "psu swap"}, format="json"
    )
    assert forced.status_code == 200 and forced.json()["state"] == "draining"
    event = AuditEvent.objects.get(action="drain")
    assert (event.node_id, event.pipeline_id, event.reason) == (
        verifier.pk,
        pipeline.pk,
        "psu swap",
    )


def test_drain_and_return_through_the_node_endpoint_are_audited_and_pushed(
    pipeline, operator, pushed, django_capture_on_commit_callbacks
):
    extra = online_node()
    place(pipeline, extra, "verify")
    bob = client_for(operator)
    with django_capture_on_commit_callbacks(execute=True):
        drained = bob.post(f"/api/v1/nodes/{extra.pk}/drain")
    assert drained.status_code == 200 and drained.json()["state"] == "draining"
    assert drained["ETag"] == f'"{Node.objects.get(pk=extra.pk).version}"'
    assert pushed == [pipeline.pk]  # every worker: the pipeline's members (peers) travel with it
    assert Pipeline.objects.get(pk=pipeline.pk).version == 2
    with django_capture_on_commit_callbacks(execute=True):
        returned = bob.post(f"/api/v1/nodes/{extra.pk}/return")
    assert returned.status_code == 200 and returned.json()["state"] == "online"
    assert pushed == [pipeline.pk, pipeline.pk]
    events = AuditEvent.objects.filter(node=extra).order_by("id")
    assert [(e.action, e.actor, e.before, e.after) for e in events] == [
        ("drain", operator, {"state": "online"}, {"state": "draining"}),
        ("return", operator, {"state": "draining"}, {"state": "online"}),
    ]


def test_a_stale_node_etag_is_409_and_changes_nothing(pipeline, operator):
    extra = online_node()
    place(pipeline, extra, "verify")
    stale = f'"{extra.version + 5}"'
    response = client_for(operator).post(f"/api/v1/nodes/{extra.pk}/drain", HTTP_IF_MATCH=stale)
    assert response.status_code == 409
    assert Node.objects.get(pk=extra.pk).state == "online"
    assert not AuditEvent.objects.exists()
    assert Pipeline.objects.get(pk=pipeline.pk).version == 1
