"""Wall links over the REST API: admins only; the token is shown once and opens the wall."""

import pytest
from django.test import Client

from fleet.accounts.models import WallLink

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("persona", ["anonymous", "outsider", "viewer", "operator"])
def test_only_admins(as_persona, persona):
    api = as_persona(persona)
    assert api.get("/api/v1/wall-links").status_code in (401, 403)
    assert api.post("/api/v1/wall-links", {"name": "x"}, format="json").status_code in (401, 403)


def test_create_list_revoke(as_persona):
    api = as_persona("admin")
    created = api.post("/api/v1/wall-links", {"name": "NOC left"}, format="json")
    assert created.status_code == 201
    body = created.json()
    assert body["name"] == "NOC left" and body["url"].endswith(
        f"/wall/screen/#token={body['token']}"
    )
    assert body["expires_at"] is None
    assert Client().get("/wall/data", HTTP_X_WALL_TOKEN=body["token"]).status_code == 200
    listed = api.get("/api/v1/wall-links").json()
    assert [link["name"] for link in listed["results"]] == ["NOC left"]
    assert "token" not in listed["results"][0]
    assert api.post("/api/v1/wall-links", {"name": ""}, format="json").status_code == 400
    revoked = api.post(f"/api/v1/wall-links/{body['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    assert Client().get("/wall/data", HTTP_X_WALL_TOKEN=body["token"]).status_code == 403
    assert api.post("/api/v1/wall-links/999999/revoke").status_code == 404
    assert WallLink.objects.get().revoked_at is not None
