"""A pipeline's JSON stays the same size at any pipeline size (issue 15): at most
PLACEMENTS_INLINE placements inline (by role, then node name), their count, whether some were
left out and the paginated list of all of them; a configuration change answers the same."""

from __future__ import annotations

import pytest

from fleet.nodes.models import HardwareProfile, Node
from fleet.pipelines.api_placements import PLACEMENTS_INLINE
from fleet.pipelines.models import Placement
from tests.factories import make_pipeline, online_node, place

pytestmark = pytest.mark.django_db

EXTRA = 37


def _big(n: int):
    p = make_pipeline(name="big")
    online_node(name="seed")  # makes the profile
    profile = HardwareProfile.objects.get(slug="h100-sxm")
    nodes = Node.objects.bulk_create(
        [
            Node(name=f"big-{i:04d}", profile=profile, roles=["draft", "verify"], state="online")
            for i in range(n)
        ]
    )
    Placement.objects.bulk_create(
        [
            Placement(pipeline=p, node=node, role="verify" if i % 3 == 0 else "draft")
            for i, node in enumerate(nodes)
        ]
    )
    return p


def test_a_big_pipeline_answers_a_bounded_number_of_placements(as_persona):
    n = PLACEMENTS_INLINE + EXTRA
    p = _big(n)
    client = as_persona("viewer")
    body = client.get(f"/api/v1/pipelines/{p.pk}").json()
    assert len(body["placements"]) == PLACEMENTS_INLINE
    assert body["placements_count"] == n and body["placements_truncated"] is True
    assert body["placements_url"] == f"/api/v1/pipelines/{p.pk}/placements"
    every = list(
        Placement.objects.filter(pipeline=p)
        .order_by("role", "node__name")
        .values_list("node_id", flat=True)
    )
    assert [pl["node"] for pl in body["placements"]] == every[:PLACEMENTS_INLINE]
    # the list of pipelines: the same bound, the same few queries
    row = client.get("/api/v1/pipelines").json()["results"][0]
    assert len(row["placements"]) == PLACEMENTS_INLINE and row["placements_count"] == n
    # all of them, paginated
    seen, url = [], body["placements_url"] + "?limit=50"
    while url:
        page = client.get(url).json()
        seen += [pl["node"] for pl in page["results"]]
        url = page["next"]
    assert seen == every
    assert client.get("/api/v1/pipelines/999999/placements").status_code == 404


def test_a_small_pipeline_still_answers_all_of_its_placements(pipeline, as_persona):
    body = as_persona("viewer").get(f"/api/v1/pipelines/{pipeline.pk}").json()
    assert len(body["placements"]) == 2 == body["placements_count"]
    assert body["placements_truncated"] is False


def test_a_configuration_change_answers_a_bounded_pipeline(as_persona):
    p = _big(PLACEMENTS_INLINE + EXTRA)
    r = as_persona("operator").post(
        f"/api/v1/pipelines/{p.pk}/k-policy",
        {"k_policy": {"mode": "fixed", "k": 3}, "version": 1},
        format="json",
    )
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["version"] == 2 and body["k_policy"] == {"mode": "fixed", "k": 3}
    assert len(body["placements"]) == PLACEMENTS_INLINE and body["placements_truncated"]


def test_the_list_query_count_does_not_grow_with_placements(
    as_persona, django_assert_max_num_queries
):
    _big(PLACEMENTS_INLINE + EXTRA)
    other = make_pipeline(name="other")
    place(other, online_node(), "verify")
    client = as_persona("viewer")
    with django_assert_max_num_queries(7):
        assert client.get("/api/v1/pipelines").status_code == 200
