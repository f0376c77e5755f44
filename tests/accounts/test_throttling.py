"""Login and API-key throttling: wrong passwords or keys lock the client out with a 429,
even for the right secret, until the lockout ends; good logins never count."""

import pytest
from django.test import Client

from fleet.accounts import key_throttle
from fleet.accounts.services import api_key_create
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db


def _form_login(client: Client, path: str, username: str, password: str):
    return client.post(path, {"username": username, "password": password})


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_wrong_passwords_lock_the_login_form_out(settings, admin, path):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        response = _form_login(client, path, "carol", "wrong-password")
        assert response.status_code in (200, 429)
    response = _form_login(client, path, "carol", PASSWORD)
    assert response.status_code == 429
    assert int(response["Retry-After"]) == settings.AXES_COOLOFF_TIME.total_seconds()
    assert b"Too many failed logins" in response.content
    assert "_auth_user_id" not in client.session  # the right password did not log in


def test_a_lockout_is_per_username_and_address(settings, admin, operator):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _form_login(client, "/login/", "carol", "wrong-password")
    response = _form_login(client, "/login/", "bob", PASSWORD)
    assert response.status_code == 302
    elsewhere = Client(REMOTE_ADDR="10.9.8.7")
    assert _form_login(elsewhere, "/login/", "carol", PASSWORD).status_code == 302


def test_good_logins_never_count(settings, admin):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT + 3):
        assert _form_login(client, "/login/", "carol", PASSWORD).status_code == 302
        client.post("/logout/")
    assert _form_login(client, "/login/", "carol", "wrong").status_code == 200
    assert _form_login(client, "/login/", "carol", PASSWORD).status_code == 302


def _bearer(key: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def _fail_keys(client: Client, settings) -> None:
    for i in range(settings.API_KEY_FAILURE_LIMIT):
        bad = f"tdm_{i:08x}_not-a-real-key"
        assert client.get("/api/v1/generations", **_bearer(bad)).status_code == 401


def test_wrong_api_keys_lock_the_address_out_with_429(settings, admin):
    settings.API_KEY_FAILURE_LIMIT = 4
    _, good = api_key_create(user=admin, name="automation")
    client = Client()
    assert client.get("/api/v1/generations", **_bearer(good)).status_code == 200
    _fail_keys(client, settings)

    wrong = _bearer("tdm_0000ffff_guess")
    response = client.get("/api/v1/generations", **wrong)
    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= settings.API_KEY_LOCKOUT_S
    assert "detail" in response.json()

    openai = client.get("/v1/models", **wrong)
    assert openai.status_code == 429
    assert openai.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(openai["Retry-After"]) > 0

    # A valid key is never refused: keys cannot be guessed, and a neighbour behind the same
    # address must not be able to lock everyone out.
    assert client.get("/api/v1/generations", **_bearer(good)).status_code == 200
    assert client.get("/v1/models", **_bearer(good)).status_code == 200

    other = Client(REMOTE_ADDR="10.1.2.3")  # another address is not locked out
    assert other.get("/api/v1/generations", **wrong).status_code == 401

    key_throttle.reset_all()  # the lockout ends (here: cleared): a wrong key is a 401 again
    assert client.get("/api/v1/generations", **wrong).status_code == 401


def test_valid_keys_never_count(settings, admin):
    settings.API_KEY_FAILURE_LIMIT = 2
    _, good = api_key_create(user=admin, name="automation")
    client = Client()
    for _ in range(10):
        assert client.get("/api/v1/generations", **_bearer(good)).status_code == 200
