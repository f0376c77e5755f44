"""The API keys page: create (the secret shown once), list (prefix, owner, role, created,
last used), revoke after a confirmation; the REST API's rules (own keys; admins all)."""

import re

import pytest
from django.test import Client
from rest_framework.test import APIClient

from fleet.accounts.models import ApiKey
from fleet.accounts.services import api_key_create

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


def _secret(response) -> str:
    return _find(rb'id="api-key-secret">(tdm_[^<]+)<', response.content, group=1).decode()


def _bearer(plain: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    return client


def test_the_nav_links_to_the_page(viewer):
    page = logged_in(viewer).get("/account/keys/")
    assert page.status_code == 200
    assert b'href="/account/keys/" class="active" aria-current="page">API keys</a>' in page.content


def test_create_use_and_revoke_a_key(operator):
    client = logged_in(operator)
    created = client.post("/account/keys/", {"name": "nightly bench"})
    assert created.status_code == 200 and created["Cache-Control"].startswith("max-age=0")
    plain = _secret(created)
    key = ApiKey.objects.get(name="nightly bench")
    assert key.user == operator and plain.startswith(f"tdm_{key.prefix}_")
    # it works on the REST API as its owner
    assert _bearer(plain).get("/api/v1/pipelines").status_code == 200
    # listed with its prefix, owner, role and when last used; the secret is not shown again
    listing = client.get("/account/keys/")
    assert plain.encode() not in listing.content
    row = _find(rf'<tr data-prefix="{key.prefix}">.*?</tr>'.encode(), listing.content, re.S)
    for text in (b"nightly bench", f"tdm_{key.prefix}_".encode(), b"bob", b"operator", b"ago"):
        assert text in row
    # revoking asks first
    ask = client.post(f"/account/keys/{key.pk}/revoke", {})
    assert ask.status_code == 200 and b"Revoke the API key" in ask.content
    assert ApiKey.objects.get(pk=key.pk).revoked_at is None
    done = client.post(f"/account/keys/{key.pk}/revoke", {"confirmed": "yes"}, follow=True)
    assert b"is revoked" in done.content
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    refused = _bearer(plain).get("/api/v1/pipelines")
    assert refused.status_code == 401 and refused.json()["detail"] == "Invalid or revoked API key."
    assert b"revoked" in client.get("/account/keys/").content


def test_people_see_and_revoke_their_own_keys_only(viewer, operator):
    theirs, _ = api_key_create(user=operator, name="bobs-key")
    mine, _ = api_key_create(user=viewer, name="alices-key")
    client = logged_in(viewer)
    page = client.get("/account/keys/")
    assert b"alices-key" in page.content and b"bobs-key" not in page.content
    assert b'name="user"' not in page.content  # only admins pick an owner
    r = client.post(f"/account/keys/{theirs.pk}/revoke", {"confirmed": "yes"})
    assert r.status_code == 404 and ApiKey.objects.get(pk=theirs.pk).revoked_at is None
    refused = client.post("/account/keys/", {"name": "for bob", "user": "bob"})
    assert refused.status_code == 400 and b"Only an admin may create keys" in refused.content
    assert not ApiKey.objects.filter(name="for bob").exists()
    assert mine.revoked_at is None


def test_admins_see_every_key_and_create_for_others(admin, operator):
    api_key_create(user=operator, name="bobs-key")
    client = logged_in(admin)
    page = client.get("/account/keys/")
    assert b"bobs-key" in page.content and b'name="user"' in page.content
    created = client.post("/account/keys/", {"name": "ci", "user": "bob"})
    assert created.status_code == 200 and ApiKey.objects.get(name="ci").user == operator
    assert b"for bob" in created.content
    missing = client.post("/account/keys/", {"name": "x", "user": "nobody"})
    assert missing.status_code == 400 and b"No user named" in missing.content


def test_bad_input_is_a_field_error_not_a_500(viewer):
    client = logged_in(viewer)
    r = client.post("/account/keys/", {"name": ""})
    assert r.status_code == 400 and b'id="error-name"' in r.content
    r = client.post("/account/keys/", {"name": "x" * 101})
    assert r.status_code == 400 and b'id="error-name"' in r.content
    assert not ApiKey.objects.exists()


def test_who_may_use_the_page(client, outsider, viewer):
    assert client.get("/account/keys/")["Location"].startswith("/login/")
    assert logged_in(outsider).get("/account/keys/").status_code == 403
    assert logged_in(outsider).post("/account/keys/", {"name": "x"}).status_code == 403
    assert not ApiKey.objects.exists()
    csrf = Client(enforce_csrf_checks=True)
    csrf.force_login(viewer)
    assert csrf.post("/account/keys/", {"name": "x"}).status_code == 403
    assert not ApiKey.objects.exists()
