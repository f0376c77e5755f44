"""Node actions from the pages: drain and return (operators), retire and token rotation
(admins, confirmed first), through the same services and audit as the REST API; the nodes
list's title and the node page's device facts with units."""

import re

import pytest
from django.test import Client

from fleet.audit.models import AuditEvent
from fleet.nodes.models import Node, NodeToken
from fleet.nodes.selectors import node_for_token
from tests.factories import make_node, make_pipeline, online_node, place

pytestmark = pytest.mark.django_db


def _find(pattern, text, flags=0, group=0):
    """The match of `pattern` in `text` (failing the test when there is none)."""
    match = re.search(pattern, text, flags)
    assert match is not None, f"{pattern!r} not found"
    return match.group(group)


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def placed():
    """An online verifier placed in a pipeline beside a second one (so draining one keeps a
    healthy verifier)."""
    pipeline = make_pipeline(name="serve")
    node = online_node(name="gpu-a")
    place(pipeline, node, "verify")
    place(pipeline, online_node(name="gpu-b"), "verify")
    place(
        pipeline, online_node(name="sram-a", profile="d-matrix-corsair", roles=("draft",)), "draft"
    )
    return node


def test_operator_drains_and_returns_a_node_from_its_page(operator, placed):
    client = logged_in(operator)
    page = client.get(f"/nodes/{placed.pk}/")
    assert b'id="node-drain"' in page.content and b'id="node-retire"' not in page.content
    r = client.post(
        f"/nodes/{placed.pk}/act/drain",
        {"reason": "kernel update", "node_version": placed.version, "next": "/nodes/"},
    )
    assert r.status_code == 302 and r["Location"] == "/nodes/"
    assert Node.objects.get(pk=placed.pk).state == "draining"
    event = AuditEvent.objects.get(action="drain")
    assert event.actor == operator and event.node_id == placed.pk
    assert event.reason == "kernel update" and event.pipeline_id == placed.placement.pipeline_id
    page = client.get(f"/nodes/{placed.pk}/")
    assert b'id="node-return"' in page.content and b'id="node-drain"' not in page.content
    version = Node.objects.get(pk=placed.pk).version
    client.post(f"/nodes/{placed.pk}/act/return", {"node_version": version})
    assert Node.objects.get(pk=placed.pk).state == "online"
    assert AuditEvent.objects.filter(action="return", node=placed).exists()


def test_the_nodes_list_offers_drain_to_operators_only(operator, viewer, placed):
    page = logged_in(operator).get("/nodes/")
    assert f'/nodes/{placed.pk}/act/drain"'.encode() in page.content
    assert b"<h1>Nodes</h1>" in page.content and b"<title>Nodes" in page.content
    page = logged_in(viewer).get("/nodes/")
    assert b"/act/drain" not in page.content and b"<h1>Fleet</h1>" not in page.content


def test_refusals_come_back_as_messages(operator, placed):
    client = logged_in(operator)
    stale = client.post(
        f"/nodes/{placed.pk}/act/drain", {"node_version": placed.version + 5}, follow=True
    )
    assert stale.status_code == 200 and b"Refused" in stale.content
    assert Node.objects.get(pk=placed.pk).state == "online"
    # the last healthy verifier is kept unless forced
    other = Node.objects.get(name="gpu-b")
    client.post(f"/nodes/{placed.pk}/act/drain", {})
    last = client.post(f"/nodes/{other.pk}/act/drain", {}, follow=True)
    assert b"last healthy verifier" in last.content
    assert Node.objects.get(pk=other.pk).state == "online"
    client.post(f"/nodes/{other.pk}/act/drain", {"force": "on"})
    assert Node.objects.get(pk=other.pk).state == "draining"
    bad = client.post(f"/nodes/{other.pk}/act/drain", {"node_version": "x"}, follow=True)
    assert b"Refused" in bad.content and b"node_version" in bad.content
    assert client.post(f"/nodes/{other.pk}/act/explode", {}).status_code == 404
    assert client.get(f"/nodes/{other.pk}/act/drain").status_code == 405


@pytest.mark.parametrize(
    "who,action,status",
    [
        ("viewer", "drain", 403),
        ("viewer", "return", 403),
        ("outsider", "drain", 403),
        ("operator", "retire", 403),
        ("operator", "rotate-token", 403),
    ],
)
def test_roles(personas, placed, who, action, status):
    r = logged_in(personas[who]).post(f"/nodes/{placed.pk}/act/{action}", {"confirmed": "yes"})
    assert r.status_code == status
    assert Node.objects.get(pk=placed.pk).state == "online"


def test_anonymous_is_sent_to_login(client, placed):
    r = client.post(f"/nodes/{placed.pk}/act/drain", {})
    assert r.status_code == 302 and r["Location"].startswith("/login/")


def test_csrf_is_required(operator, placed):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post(f"/nodes/{placed.pk}/act/drain", {}).status_code == 403
    assert Node.objects.get(pk=placed.pk).state == "online"


def test_admin_retires_after_confirming(admin):
    node, token = make_node(name="old-box")
    client = logged_in(admin)
    ask = client.post(f"/nodes/{node.pk}/act/retire", {"node_version": node.version})
    assert ask.status_code == 200 and b"Retire old-box?" in ask.content
    assert Node.objects.get(pk=node.pk).state == "registered"  # nothing happened yet
    assert b'name="confirmed" value="yes"' in ask.content
    done = client.post(
        f"/nodes/{node.pk}/act/retire", {"node_version": node.version, "confirmed": "yes"}
    )
    assert done.status_code == 302
    assert Node.objects.get(pk=node.pk).state == "retired"
    assert node_for_token(token) is None  # its token died with it
    page = client.get(f"/nodes/{node.pk}/")
    assert b'id="node-actions"' not in page.content  # nothing left to do to a retired node
    event = AuditEvent.objects.get(action="node.retire", node=node)
    assert event.actor == admin  # audited as the admin who confirmed, not "system"


def test_admin_rotates_a_token_and_sees_it_once(admin):
    node, old = make_node(name="verify-rot")
    client = logged_in(admin)
    ask = client.post(f"/nodes/{node.pk}/act/rotate-token", {})
    assert b"Rotate the token of verify-rot?" in ask.content
    assert node_for_token(old) is not None
    done = client.post(f"/nodes/{node.pk}/act/rotate-token", {"confirmed": "yes"})
    assert done.status_code == 200 and done["Cache-Control"].startswith("max-age=0")
    new = _find(rb'id="node-token">(tdn_[^<]+)<', done.content, group=1).decode()
    assert node_for_token(old) is None and node_for_token(new) == node
    assert NodeToken.objects.filter(node=node, revoked_at__isnull=True).count() == 1
    assert new.encode() not in client.get(f"/nodes/{node.pk}/").content
    assert AuditEvent.objects.get(action="node.token_rotate", node=node).actor == admin


def test_device_facts_are_labelled_with_units(viewer):
    node, _ = make_node(name="gpu-facts")
    Node.objects.filter(pk=node.pk).update(
        device_info={
            "torch": "2.13.0",
            "host": "box-1",
            "pid": 4242,
            "kind": "gpu",
            "device": "cuda:0",
            "name": "NVIDIA H200",
            "memory_gb": 139.8,
            "firmware": "x1",
        }
    )
    page = logged_in(viewer).get(f"/nodes/{node.pk}/").content.decode()
    facts = _find(r'<dl class="facts" id="device-facts".*?</dl>', page, re.S)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", facts))
    assert "Device NVIDIA H200" in text
    assert "Device memory 139.8 GB" in text
    assert "Kind GPU" in text and "Torch device cuda:0" in text and "Firmware x1" in text
    visible = re.sub(r"<script.*?</script>|<[^>]+>", " ", page, flags=re.S)
    assert "memory_gb" not in visible and "139.8 GB" in text  # no raw key dump


def test_device_facts_when_nothing_was_reported(viewer):
    node, _ = make_node(name="fresh-node")
    page = logged_in(viewer).get(f"/nodes/{node.pk}/").content
    assert b"not reported yet" in page
