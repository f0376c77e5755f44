import pytest
from django.contrib.staticfiles import finders

from tests.factories import PASSWORD


def test_home_redirects_anonymous_users_to_login(client, db):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/"


def test_login_page_renders_in_the_console_style(client, db):
    response = client.get("/login/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "css/tandem.css" in body
    assert 'name="csrfmiddlewaretoken"' in body
    assert "Log out" not in body  # no navigation before login


def test_login_then_home(client, viewer):
    response = client.post("/login/", {"username": "alice", "password": PASSWORD, "next": "/"})
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_wrong_password_is_refused(client, viewer):
    response = client.post("/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert "didn't match" in response.content.decode()
    assert client.get("/").status_code == 302


@pytest.mark.parametrize("persona", ["viewer", "operator", "admin", "outsider"])
def test_layout_shows_nav_user_role_and_logout(client, personas, persona):
    user = personas[persona]
    client.force_login(user)
    body = client.get("/").content.decode()
    for href in ("/fleet/", "/nodes/", "/pipelines/", "/wall/", "/planner/", "/api/v1/docs/"):
        assert f'href="{href}"' in body
    assert user.username in body
    role = "none" if persona == "outsider" else persona
    assert f"role-{role}" in body
    assert 'action="/logout/"' in body and 'method="post"' in body
    assert 'name="csrfmiddlewaretoken"' in body


def test_logout_is_a_post(client, viewer):
    client.force_login(viewer)
    assert client.get("/logout/").status_code == 405
    response = client.post("/logout/")
    assert response.status_code == 302
    assert client.get("/").status_code == 302


def test_stylesheet_and_icon_are_found_by_staticfiles():
    assert finders.find("css/tandem.css")
    assert finders.find("img/tandem.svg")
