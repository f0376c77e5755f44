"""A generation's text (prompt, output, stop sequences, its stream) is its owner's and the
content readers': the content role (TANDEM_CONTENT_ROLE, admin by default) and users given
the "content" grant. Everyone else with "view" sees the metadata and figures only."""

import pytest

from fleet.accounts.services import user_set_content_access
from inference import wire
from inference.models import Generation, GenerationState
from inference.selectors import stream_owner
from tests.serving.conftest import script

URL = "/api/v1/generations"
TEXT_FIELDS = ("prompt", "output_text")


@pytest.fixture
def bobs_generation(serving, as_persona):
    """A running generation of bob (operator) with output so far; its stop is secret too."""
    body = {"pipeline": "demo", "prompt": "my secret prompt", "max_tokens": 8, "stop": "XYZ"}
    created = as_persona("operator").post(URL, body, format="json").json()
    for event in script("Hello, world!")[:2]:
        wire.publish(created["id"], event, node=stream_owner(created["id"]))
    Generation.objects.filter(pk=created["id"]).update(state=GenerationState.RUNNING)
    return created["id"]


def _detail(client, gid):
    response = client.get(f"{URL}/{gid}")
    assert response.status_code == 200
    return response.json()


def _listed(client, gid):
    response = client.get(URL)
    assert response.status_code == 200
    return next(g for g in response.json()["results"] if g["id"] == gid)


def test_a_viewer_sees_figures_but_not_text(bobs_generation, as_persona):
    viewer = as_persona("viewer")
    for data in (_detail(viewer, bobs_generation), _listed(viewer, bobs_generation)):
        assert data["content_visible"] is False
        assert all(data[f] is None for f in TEXT_FIELDS)
        assert data["params"]["stop"] is None and data["params"]["max_tokens"] == 8
        assert data["state"] == "running" and data["user"] == "bob"
    assert _detail(viewer, bobs_generation)["output_token_count"] == 6  # figures stay
    response = viewer.get(f"{URL}/{bobs_generation}/stream")
    assert response.status_code == 403
    assert "secret" not in viewer.get(URL).content.decode()


def test_the_owner_and_an_admin_see_the_text(bobs_generation, as_persona):
    for persona in ("operator", "admin"):
        data = _detail(as_persona(persona), bobs_generation)
        assert data["content_visible"] is True
        assert data["prompt"] == "my secret prompt" and data["output_text"] == "Hello,"
        assert data["params"]["stop"] == ["XYZ"]
        assert _listed(as_persona(persona), bobs_generation)["prompt"] == "my secret prompt"


def test_an_operator_does_not_see_another_users_text(serving, as_persona):
    body = {"pipeline": "demo", "prompt": "carol's prompt", "max_tokens": 8}
    gid = as_persona("admin").post(URL, body, format="json").json()["id"]
    data = _detail(as_persona("operator"), gid)
    assert data["content_visible"] is False and data["prompt"] is None


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume")
def test_a_content_grant_opens_the_text_to_one_viewer(bobs_generation, as_persona, viewer):
    user_set_content_access(user=viewer, allowed=True)
    client = as_persona("viewer")
    assert _detail(client, bobs_generation)["prompt"] == "my secret prompt"
    wire.publish(
        bobs_generation, wire.done_event("stop", 16, 6), node=stream_owner(bobs_generation)
    )
    response = client.get(f"{URL}/{bobs_generation}/stream")
    assert response.status_code == 200
    assert '"text":"Hel"' in b"".join(response).decode()
    user_set_content_access(user=viewer, allowed=False)
    assert _detail(as_persona("viewer"), bobs_generation)["prompt"] is None


def test_the_content_role_is_configurable(bobs_generation, as_persona, settings):
    settings.CONTENT_ROLE = "viewer"
    assert _detail(as_persona("viewer"), bobs_generation)["prompt"] == "my secret prompt"
    assert as_persona("outsider").get(f"{URL}/{bobs_generation}").status_code == 403


def test_an_operator_cannot_cancel_another_users_generation(bobs_generation, as_persona):
    response = as_persona("admin").post(  # someone else's, to cancel
        URL, {"pipeline": "demo", "prompt": "x", "max_tokens": 8}, format="json"
    )
    gid = response.json()["id"]
    assert as_persona("operator").delete(f"{URL}/{gid}").status_code == 403
    assert Generation.objects.get(pk=gid).state != GenerationState.CANCELLED
    assert as_persona("admin").delete(f"{URL}/{bobs_generation}").status_code == 202  # admin
