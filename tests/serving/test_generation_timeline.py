"""A generation's timeline through the API (`/api/v1/generations/{id}/timeline`) and the
console page (`/generations/{id}/`): who may see it, and what it shows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from inference.models import Generation
from tests.conftest import PASSWORD, client_for
from tests.factories import make_pipeline, online_node, user


@pytest.fixture
def finished(db, viewer):
    """A finished generation of the viewer's, with a verifier's round log."""
    pipeline = make_pipeline(name="tl")
    verifier = online_node(name="tl-v")
    created = timezone.now() - timedelta(seconds=2)
    t0 = created.timestamp() + 0.05
    return Generation.objects.create(
        pipeline=pipeline,
        user=viewer,
        prompt="secret prompt",
        prompt_tokens=[1, 2, 3],
        params={"max_tokens": 8},
        state="finished",
        finish_reason="length",
        output_tokens=[5, 6, 7, 8, 9, 10],
        output_text="secret output",
        verifier=verifier,
        attempts=2,
        created_at=created,
        started_at=created + timedelta(milliseconds=40),
        first_token_at=created + timedelta(milliseconds=80),
        finished_at=created + timedelta(milliseconds=300),
        counters={"num_drafts": 2, "num_draft_tokens": 8, "num_accepted_tokens": 3},
        rounds={
            "t0": t0,
            "prefill_ms": 20.0,
            "fields": ["at_ms", "k", "accepted", "batch", "verify_ms"],
            "rounds": [[100.0, 4, 3, 2, 9.5], [180.0, 4, 0, 3, 9.0], [240.0, 0, 0, 1, 3.0]],
            "dropped": 0,
        },
        route_events=[
            {
                "at": (created + timedelta(milliseconds=20)).isoformat(),
                "kind": "rerouted",
                "attempt": 1,
                "drafter": None,
                "verifier": 999,
                "reason": "node 999 lost",
            }
        ],
    )


def _url(g) -> str:
    return f"/api/v1/generations/{g.pk}/timeline"


@pytest.mark.parametrize(
    "persona, status",
    [("anonymous", 401), ("outsider", 403), ("operator", 200), ("admin", 200), ("viewer", 200)],
)
def test_who_sees_a_timeline(finished, as_persona, persona, status):
    """The owner (a viewer here) and operators see it; no role, no timeline."""
    assert as_persona(persona).get(_url(finished)).status_code == status


def test_a_viewer_does_not_see_another_users_timeline(finished, db):
    other = user("dave", "viewer")
    response = client_for(other).get(_url(finished))
    assert response.status_code == 403
    assert "detail" in response.json()


def test_an_unknown_generation_is_404(db, operator):
    response = client_for(operator).get(
        "/api/v1/generations/7c0b5b9e-6f1b-4d6f-9b7a-2a6d3c1e9f00/timeline"
    )
    assert response.status_code == 404


def test_the_timeline_orders_the_path_and_holds_no_text(finished, operator):
    body = client_for(operator).get(_url(finished)).json()
    assert [e["kind"] for e in body["events"]] == [
        "queued",
        "rerouted",
        "claimed",
        "prefill",
        "first_token",
        "finished",
    ]
    assert [e["at_ms"] for e in body["events"]] == pytest.approx([0, 20, 40, 50, 80, 300], abs=1)
    assert [r["at_ms"] for r in body["rounds"]] == pytest.approx([150, 230, 290], abs=1)
    s = body["summary"]
    assert (s["rounds"], s["drafted"], s["accepted"], s["attempts"]) == (3, 8, 3, 2)
    assert s["acceptance"] == pytest.approx(3 / 8)
    assert "secret" not in str(body)


def test_the_detail_links_to_its_timeline(finished, operator):
    body = client_for(operator).get(f"/api/v1/generations/{finished.pk}").json()
    assert body["links"]["timeline"].endswith(_url(finished))


def _page_client(u) -> Client:
    c = Client()
    assert c.login(username=u.username, password=PASSWORD)
    return c


def test_the_console_page_shows_the_path_and_rounds(finished, operator):
    response = _page_client(operator).get(f"/generations/{finished.pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    for label in ("Queued", "Re-routed", "Claimed", "Prefill", "First token", "Finished"):
        assert f"<td>{label}</td>" in html
    assert "node 999 (gone)" in html and "tl-v" in html  # the pairs by name
    assert html.count('class="round-k"') == 3
    assert "node 999 lost" in html
    assert "secret" not in html


def test_the_console_page_refuses_who_may_not_see_it(finished, db):
    other = user("erin", "viewer")
    assert _page_client(other).get(f"/generations/{finished.pk}/").status_code == 403
    assert Client().get(f"/generations/{finished.pk}/").status_code == 302  # to the login


def test_a_node_page_links_its_generations_to_their_timelines(finished, operator):
    html = _page_client(operator).get(f"/nodes/{finished.verifier_id}/").content.decode()
    assert f'href="/generations/{finished.pk}/"' in html


def test_a_running_generation_has_a_timeline_so_far(finished, operator):
    Generation.objects.filter(pk=finished.pk).update(
        state="running", finished_at=None, rounds={}, first_token_at=None
    )
    body = client_for(operator).get(_url(finished)).json()
    assert [e["kind"] for e in body["events"]] == ["queued", "rerouted", "claimed"]
    assert body["rounds"] == [] and body["summary"]["total_ms"] is None
    html = _page_client(operator).get(f"/generations/{finished.pk}/").content.decode()
    assert "the verifier sends its rounds with the finish" in html


def test_a_pipeline_page_lists_its_recent_generations_for_operators(finished, operator, viewer):
    html = _page_client(operator).get(f"/pipelines/{finished.pipeline_id}/").content.decode()
    assert 'id="recent-generations"' in html
    assert f'href="/generations/{finished.pk}/"' in html
    assert "38%" in html  # 3 of 8 drafted tokens accepted
    assert "secret" not in html
    html = _page_client(viewer).get(f"/pipelines/{finished.pipeline_id}/").content.decode()
    assert 'id="recent-generations"' not in html  # their timelines are not all theirs to see
