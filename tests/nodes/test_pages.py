import re

import pytest
from django.test import Client

from fleet.nodes.models import Node
from fleet.nodes.selectors import node_for_token
from tests.factories import make_node

pytestmark = pytest.mark.django_db

FORM = {
    "name": "draft-groq-01",
    "profile": "groq-lpu",
    "roles": ["draft"],
    "labels": "zone=eu-west\nrack=r3",
    "address": "10.1.2.3",
}


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("path", ["/nodes/", "/nodes/register", "/nodes/1/"])
def test_pages_require_login(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_outsider_gets_403(outsider):
    assert logged_in(outsider).get("/nodes/").status_code == 403


def test_viewer_sees_the_list_without_a_register_button(viewer):
    node, _ = make_node(name="verify-h100-a", simulated=True)
    Node.objects.filter(pk=node.pk).update(state="online")
    response = logged_in(viewer).get("/nodes/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "verify-h100-a" in html and "state-online" in html and "simulated" in html
    assert "/nodes/register" not in html
    assert "never" in html  # last seen


def test_list_filters_by_state_and_role(viewer):
    make_node(name="drafter-x", roles=["draft"], profile="d-matrix-corsair")
    verifier, _ = make_node(name="verifier-y", roles=["verify"])
    Node.objects.filter(pk=verifier.pk).update(state="draining")
    html = logged_in(viewer).get("/nodes/?role=draft").content.decode()
    assert "drafter-x" in html and "verifier-y" not in html
    html = logged_in(viewer).get("/nodes/?state=draining").content.decode()
    assert "verifier-y" in html and "drafter-x" not in html


def test_viewer_and_operator_cannot_register(viewer, operator):
    for user in (viewer, operator):
        client = logged_in(user)
        assert client.get("/nodes/register").status_code == 403
        assert client.post("/nodes/register", FORM).status_code == 403
    assert not Node.objects.exists()


def test_admin_registers_a_node_and_sees_its_token_once(admin):
    client = logged_in(admin)
    assert "Register a node" in client.get("/nodes/").content.decode()
    assert client.get("/nodes/register").status_code == 200
    response = client.post("/nodes/register", FORM)
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    html = response.content.decode()
    found = re.search(r"tdn_[0-9a-f]{8}_[A-Za-z0-9_-]+", html)
    assert found is not None, html
    token = found.group(0)
    node = Node.objects.get(name="draft-groq-01")
    assert node_for_token(token) == node
    assert node.labels == {"zone": "eu-west", "rack": "r3"}
    detail = client.get(f"/nodes/{node.pk}/").content.decode()
    list_page = client.get("/nodes/").content.decode()
    assert token not in detail and token not in list_page
    assert f"tdn_{token.split('_')[1]}_" in detail  # the prefix only


@pytest.mark.parametrize(
    "change,field",
    [
        ({"name": "Bad Name"}, "name"),
        ({"roles": []}, "roles"),
        ({"profile": "nope"}, "profile"),
        ({"labels": "no-equals-sign"}, "labels"),
    ],
)
def test_register_form_shows_errors(admin, change, field):
    response = logged_in(admin).post("/nodes/register", {**FORM, **change})
    assert response.status_code == 200
    assert field in response.context["form"].errors
    assert not Node.objects.exists()


def test_register_duplicate_name_is_a_form_error(admin):
    make_node(name="draft-groq-01")
    response = logged_in(admin).post("/nodes/register", FORM)
    assert "name" in response.context["form"].errors


def test_register_needs_csrf(admin):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin)
    assert client.post("/nodes/register", FORM).status_code == 403
    page = client.get("/nodes/register")
    token = page.cookies["csrftoken"].value
    response = client.post("/nodes/register", {**FORM, "csrfmiddlewaretoken": token})
    assert response.status_code == 200 and Node.objects.filter(name="draft-groq-01").exists()


def test_detail_page(viewer, admin):
    """One page per node: registry facts, tokens (admins) and live figures together."""
    node, _ = make_node(name="verify-01")
    html = logged_in(viewer).get(f"/nodes/{node.pk}/").content.decode()
    assert "verify-01" in html and "Registry entry" in html and "live-page" in html
    assert "<h2>Tokens</h2>" not in html  # admins only
    assert "<h2>Tokens</h2>" in logged_in(admin).get(f"/nodes/{node.pk}/").content.decode()
    assert logged_in(viewer).get("/nodes/424242/").status_code == 404
    assert logged_in(viewer).get("/nodes/99999999999999999999999/").status_code == 404
    moved = logged_in(viewer).get(f"/nodes/{node.pk}/live")  # the old address of its live half
    assert moved.status_code == 301 and moved["Location"] == f"/nodes/{node.pk}/"
