"""What-if: fleet mix changes, predicted before and after (modeled); page and API."""

import pytest

from fleet.planner import whatif
from tests.factories import make_pipeline, online_node, place

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(pipeline):
    p = make_pipeline(name="gpu-drafted")
    place(p, online_node(name="h-v1"), "verify")
    place(p, online_node(name="h-d1"), "draft")
    place(p, online_node(name="h-d2"), "draft")
    return [pipeline, p]


def test_move_gpus_from_drafting_to_verification(fleet):
    result = whatif.what_if({"move_to_verify": 1})
    before, after = result["before"], result["after"]
    assert result["modeled"] and before["modeled"]
    row = next(r for r in after["pipelines"] if r["name"] == "gpu-drafted")
    assert (row["n_verifiers"], row["n_drafters"]) == (2, 1)
    assert after["tokens_per_s"] != before["tokens_per_s"]
    # Corsair has no price: $/M unknown until a price is given
    assert (
        before["usd_per_million_tokens"] is None
        and "d-matrix-corsair" in before["unpriced_profiles"]
    )
    priced = whatif.what_if({"prices": {"d-matrix-corsair": 1.5}})
    assert priced["before"]["usd_per_million_tokens"] > 0


def test_add_sram_drafters(fleet):
    result = whatif.what_if({"add_drafters": 4, "add_drafter_profile": "groq-lpu"})
    assert sum(r["n_drafters"] for r in result["after"]["pipelines"]) == 3 + 4
    assert result["after"]["tokens_per_s"] >= result["before"]["tokens_per_s"]


def test_sram_cannot_be_added_as_verifier(fleet):
    result = whatif.what_if({"add_verifiers": 2, "add_verifier_profile": "groq-lpu"})
    assert result["notes"] and result["after"]["tokens_per_s"] == result["before"]["tokens_per_s"]


def test_what_if_page_renders_for_operator(fleet, operator, client):
    client.force_login(operator)
    page = client.get("/planner/what-if")
    assert page.status_code == 200 and b"modeled" in page.content
    page = client.get(
        "/planner/what-if",
        {
            "run": "1",
            "move_to_verify": "1",
            "add_drafters": "2",
            "add_drafter_profile": "groq-lpu",
            "include_simulated": "on",
            "price_groq-lpu": "2",
        },
    )
    assert page.status_code == 200
    assert (
        b"today's configuration" in page.content
        and b"Before" in page.content
        and b"After" in page.content
    )


def test_what_if_api_validates(fleet, as_persona):
    client = as_persona("viewer")
    assert (
        client.post("/api/v1/planner/what-if", {"move_to_verify": -1}, format="json").status_code
        == 400
    )
    ok = client.post(
        "/api/v1/planner/what-if",
        {"add_drafters": 1, "add_drafter_profile": "groq-lpu"},
        format="json",
    )
    assert ok.status_code == 200 and ok.json()["modeled"] is True


def test_anonymous_is_sent_to_login(client):
    response = client.get("/planner/what-if")
    assert response.status_code == 302 and "/login" in response["Location"]


def test_recommendations_page(fleet, operator, viewer, client):
    client.force_login(operator)
    p = fleet[1]
    page = client.get(f"/planner/pipelines/{p.pk}/")
    assert page.status_code == 200 and b"Apply" in page.content
    preview = client.get(
        f"/planner/pipelines/{p.pk}/",
        {"preview": "1", "action": "set_k_policy", "mode": "fixed", "k": "2"},
    )
    assert preview.status_code == 200 and b"Before" in preview.content
    client.force_login(viewer)
    page = client.get(f"/planner/pipelines/{p.pk}/")
    assert page.status_code == 200 and b"Apply</button>" not in page.content
    assert client.post(f"/planner/pipelines/{p.pk}/apply", {"what": "k_policy"}).status_code == 403
