"""What `manage.py up`'s supervisor reports (its state file) reaches signed-in viewers: a
banner on every console page and `GET /api/v1/processes`; nobody else sees it."""

import time

import pytest
from django.test import Client

from fleet.runtime.supervision import state_path, write_state
from tests.conftest import PASSWORD, client_for

pytestmark = pytest.mark.django_db


def _login(user) -> Client:
    c = Client()
    assert c.login(username=user.username, password=PASSWORD)
    return c


def _child(name, state, **extra):
    return {
        "name": name,
        "state": state,
        "pid": None,
        "restarts": 4,
        "crashes": 5,
        "last_exit": "was killed by SIGKILL",
        "since": time.time(),
        "node": "",
        **extra,
    }


@pytest.fixture
def gave_up(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    children = [
        _child("web", "running", pid=123, restarts=0, crashes=0, last_exit=""),
        _child("node-verify", "failed", node="demo-verify"),
        _child("telemetry", "restarting", restarts=1, crashes=1, last_exit="exited with code 1"),
    ]
    write_state(state_path(tmp_path), {"pid": 1, "updated": time.time(), "children": children})


def test_viewers_see_which_process_was_given_up_on_and_why(gave_up, viewer):
    body = _login(viewer).get("/").content.decode()
    assert "<strong>node-verify</strong> crashed 5 times in a row" in body
    assert "gave up restarting it. Last exit: it was killed by SIGKILL." in body
    assert "<strong>telemetry</strong> exited with code 1;" in body and "is restarting" in body
    assert "<strong>web</strong>" not in body  # running: nothing to say
    assert "node-verify" in _login(viewer).get("/nodes/").content.decode()  # every page


def test_no_banner_for_users_without_a_role_or_without_a_supervisor(
    gave_up, outsider, viewer, settings, tmp_path
):
    assert "node-verify" not in _login(outsider).get("/").content.decode()
    settings.DATA_DIR = tmp_path / "elsewhere"
    assert "gave up" not in _login(viewer).get("/").content.decode()


def test_processes_api(gave_up, viewer, outsider, api, settings, tmp_path):
    assert api.get("/api/v1/processes").status_code in (401, 403)
    assert client_for(outsider).get("/api/v1/processes").status_code == 403
    body = client_for(viewer).get("/api/v1/processes").json()
    assert body["supervised"] is True
    states = {p["name"]: (p["state"], p["last_exit"]) for p in body["processes"]}
    assert states["node-verify"] == ("failed", "was killed by SIGKILL")
    assert states["web"] == ("running", "")
    settings.DATA_DIR = tmp_path / "elsewhere"
    assert client_for(viewer).get("/api/v1/processes").json() == {
        "supervised": False,
        "processes": [],
    }
