"""Wall links: an optional expiry, and a token that never travels in a URL the server sees
(the link's fragment, a header for the figures, a subprotocol for the socket)."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from fleet.accounts.models import WallLink
from fleet.accounts.wall_links import wall_link_create, wall_link_for_token

pytestmark = pytest.mark.django_db


def test_a_link_carries_its_token_in_the_fragment(as_persona):
    body = as_persona("admin").post("/api/v1/wall-links", {"name": "NOC"}, format="json").json()
    path, _, fragment = body["url"].partition("#")
    assert body["token"] not in path and fragment == f"token={body['token']}"


def test_an_old_query_link_is_sent_on_to_the_fragment(admin):
    _, token = wall_link_create(name="NOC", actor=admin)
    response = Client().get(f"/wall/?token={token}")
    assert response.status_code == 302
    assert response["Location"].endswith(f"/wall/screen/#token={token}")
    assert response["Referrer-Policy"] == "no-referrer"


def test_the_screen_page_holds_no_data_and_needs_no_login():
    response = Client().get("/wall/screen/")
    assert response.status_code == 200 and b'"screen": true' in response.content
    assert response["Cache-Control"] == "no-store"
    assert Client().get("/wall/").status_code == 302  # the full wall: a login


def test_a_link_expires(admin, as_persona):
    api = as_persona("admin")
    soon = timezone.now() + timedelta(hours=1)
    body = api.post(
        "/api/v1/wall-links", {"name": "lobby", "expires_at": soon.isoformat()}, format="json"
    ).json()
    token = body["token"]
    assert body["expires_at"] is not None
    assert Client().get("/wall/data", HTTP_X_WALL_TOKEN=token).status_code == 200
    WallLink.objects.filter(pk=body["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert Client().get("/wall/data", HTTP_X_WALL_TOKEN=token).status_code == 403
    assert wall_link_for_token(token) is None
    past = {"name": "x", "expires_at": (timezone.now() - timedelta(minutes=1)).isoformat()}
    refused = api.post("/api/v1/wall-links", past, format="json")
    assert refused.status_code == 400 and "expires_at" in refused.json()


def test_the_links_page_sets_an_expiry(admin):
    carol = Client()
    carol.force_login(admin)
    assert carol.post("/wall/links/", {"name": "NOC", "expires": "1d"}).status_code == 200
    link = WallLink.objects.get(name="NOC")
    assert link.expires_at is not None
    assert timedelta(hours=23) < link.expires_at - timezone.now() <= timedelta(days=1)
    assert carol.post("/wall/links/", {"name": "x", "expires": "1y"}).status_code == 200
    assert not WallLink.objects.filter(name="x").exists()  # refused with a message
    assert b"Expires" in carol.get("/wall/links/").content


def test_a_refused_link_says_why_for_good(admin):
    """Issue 24.3: the screen's figures request is refused with the reason the screen shows."""
    from fleet.accounts.wall_links import wall_link_revoke

    def refused(token: str) -> str:
        response = Client().get("/wall/data", HTTP_X_WALL_TOKEN=token)
        assert response.status_code == 403
        return response.json()["detail"]

    revoked, token = wall_link_create(name="NOC", actor=admin)
    wall_link_revoke(link=revoked, actor=admin)
    assert refused(token) == "This wall link (“NOC”) was revoked."
    expired, old = wall_link_create(
        name="Lobby", actor=admin, expires_at=timezone.now() + timedelta(hours=1)
    )
    WallLink.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(hours=1))
    assert refused(old).startswith("This wall link (“Lobby”) expired at ")
    assert refused(f"{old[:-2]}xx") == "This wall link is not valid."
    page = Client().get("/wall/screen/").content.decode()  # the page's own message, hidden
    assert 'id="wall-denied"' in page and "This address needs a valid wall link." in page
