"""API keys: users manage their own, admins everyone's; the plain key is shown once."""

import pytest
from django.core.management import call_command

from fleet.accounts.authentication import user_for_api_key
from fleet.accounts.models import ApiKey

URL = "/api/v1/api-keys"


def test_create_shows_the_key_once_and_it_works(as_persona, viewer):
    client = as_persona("viewer")
    response = client.post(URL, {"name": "laptop"}, format="json")
    assert response.status_code == 201
    data = response.json()
    assert data["key"].startswith("tdm_") and data["user"] == "alice" and data["active"]
    assert user_for_api_key(data["key"]) == viewer
    listed = client.get(URL).json()["results"]
    assert {k["name"] for k in listed} == {"test", "laptop"}  # as_persona's key and the new one
    assert all("key" not in k for k in listed)
    assert "key" not in client.get(f"{URL}/{data['id']}").json()


def test_users_see_and_revoke_only_their_own(as_persona, personas):
    bob = as_persona("operator")
    mine = bob.post(URL, {"name": "ci"}, format="json").json()
    alice = as_persona("viewer")
    assert {k["user"] for k in alice.get(URL).json()["results"]} == {"alice"}
    assert alice.get(f"{URL}/{mine['id']}").status_code == 404
    assert alice.delete(f"{URL}/{mine['id']}").status_code == 404
    revoked = bob.delete(f"{URL}/{mine['id']}")
    assert revoked.status_code == 200 and revoked.json()["active"] is False
    assert bob.delete(f"{URL}/{mine['id']}").status_code == 200  # idempotent
    assert user_for_api_key(mine["key"]) is None


def test_admins_see_all_and_create_for_others(as_persona, personas):
    as_persona("operator")  # bob gets a key
    carol = as_persona("admin")
    users = {k["user"] for k in carol.get(URL).json()["results"]}
    assert {"bob", "carol"} <= users
    assert {k["user"] for k in carol.get(URL, {"user": "bob"}).json()["results"]} == {"bob"}
    made = carol.post(URL, {"name": "svc", "user": "bob"}, format="json")
    assert made.status_code == 201 and made.json()["user"] == "bob"
    assert carol.post(URL, {"name": "x", "user": "nobody"}, format="json").status_code == 400


def test_non_admins_cannot_create_for_others_and_outsiders_nothing(as_persona, personas):
    response = as_persona("operator").post(URL, {"name": "x", "user": "alice"}, format="json")
    assert response.status_code == 400 and "user" in response.json()
    assert as_persona("operator").post(URL, {}, format="json").status_code == 400
    assert as_persona("outsider").get(URL).status_code == 403
    assert as_persona("outsider").post(URL, {"name": "x"}, format="json").status_code == 403
    assert as_persona("anonymous").get(URL).status_code == 401


def test_create_api_key_command(operator, capsys):
    call_command("create_api_key", "--user", "bob", "--name", "bench")
    plain = capsys.readouterr().out.strip()
    assert user_for_api_key(plain) == operator
    assert ApiKey.objects.get(user=operator, name="bench").prefix in plain


def test_create_api_key_command_unknown_user(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no user named"):
        call_command("create_api_key", "--user", "ghost")
