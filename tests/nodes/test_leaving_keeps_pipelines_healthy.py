"""Retiring a node, or revoking its tokens, takes its capacity away for good: like a drain,
it may not take a pipeline's last healthy drafter or verifier with it unless forced (409 with
the reason; nothing changes, nothing is audited). Issue 25 item 6: they skipped the check."""

import pytest
from django.test import Client

from fleet.audit.models import AuditEvent
from fleet.nodes.models import Node, NodeToken
from tests.factories import make_pipeline, online_node, place

pytestmark = pytest.mark.django_db


@pytest.fixture
def pair():
    pipeline = make_pipeline()
    drafter, verifier = online_node(name="d-1"), online_node(name="v-1")
    place(pipeline, drafter, "draft")
    place(pipeline, verifier, "verify")
    return pipeline, drafter, verifier


def test_retiring_the_last_healthy_verifier_is_refused_unless_forced(pair, as_persona):
    _pipeline, _drafter, verifier = pair
    carol = as_persona("admin")
    refused = carol.post(f"/api/v1/nodes/{verifier.pk}/retire", {}, format="json")
    assert refused.status_code == 409
    assert "last healthy verifier" in refused.json()["detail"]
    assert Node.objects.get(pk=verifier.pk).state == "online"
    assert not AuditEvent.objects.filter(action="node.retire").exists()
    assert NodeToken.objects.filter(node=verifier, revoked_at__isnull=True).exists()

    bad = carol.post(f"/api/v1/nodes/{verifier.pk}/retire", {"force": "maybe"}, format="json")
    assert bad.status_code == 400 and "force" in bad.json()

    done = carol.post(f"/api/v1/nodes/{verifier.pk}/retire", {"force": True}, format="json")
    assert done.status_code == 200 and done.json()["state"] == "retired"
    assert AuditEvent.objects.get(action="node.retire").node_id == verifier.pk


def test_a_second_healthy_verifier_lets_one_go(pair, as_persona):
    pipeline, _drafter, verifier = pair
    place(pipeline, online_node(name="v-2"), "verify")
    carol = as_persona("admin")
    assert carol.delete(f"/api/v1/nodes/{verifier.pk}").status_code == 204
    assert Node.objects.get(pk=verifier.pk).state == "retired"


def test_delete_takes_force_in_the_query(pair, as_persona):
    _pipeline, drafter, _verifier = pair
    carol = as_persona("admin")
    assert carol.delete(f"/api/v1/nodes/{drafter.pk}").status_code == 409
    assert carol.delete(f"/api/v1/nodes/{drafter.pk}?force=yes").status_code == 400
    assert carol.delete(f"/api/v1/nodes/{drafter.pk}?force=true").status_code == 204


def test_revoking_the_last_healthy_drafters_tokens_is_refused_unless_forced(pair, as_persona):
    _pipeline, drafter, _verifier = pair
    carol = as_persona("admin")
    refused = carol.post(f"/api/v1/nodes/{drafter.pk}/token/revoke", {}, format="json")
    assert refused.status_code == 409 and "last healthy drafter" in refused.json()["detail"]
    assert NodeToken.objects.filter(node=drafter, revoked_at__isnull=True).count() == 1
    forced = carol.post(f"/api/v1/nodes/{drafter.pk}/token/revoke", {"force": True}, format="json")
    assert forced.json() == {"revoked": 1}
    # rotation is never refused: the node has its new token at once
    assert carol.post(f"/api/v1/nodes/{drafter.pk}/token/rotate").status_code == 201


def test_the_page_says_why_and_its_force_box_survives_the_confirmation(pair, admin):
    _pipeline, _drafter, verifier = pair
    client = Client()
    client.force_login(admin)
    url = f"/nodes/{verifier.pk}/act/retire"
    refused = client.post(url, {"node_version": verifier.version, "confirmed": "yes"}, follow=True)
    assert b"last healthy verifier" in refused.content
    assert Node.objects.get(pk=verifier.pk).state == "online"
    ask = client.post(url, {"node_version": verifier.version, "force": "on"})
    assert b'name="force" value="on"' in ask.content  # carried to the confirmation
    client.post(url, {"node_version": verifier.version, "force": "on", "confirmed": "yes"})
    assert Node.objects.get(pk=verifier.pk).state == "retired"
