"""The node list pages by cursor: stable keyset order on (field, id) for every ordering,
NULLs last, forward and back, no gaps or repeats while rows are added, and the same number
of queries for any page of any fleet."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.nodes.models import HardwareProfile, Node

pytestmark = pytest.mark.django_db

STATES = ["online", "online", "draining", "lost", "online", "registered", "retired"]


@pytest.fixture
def alice(as_persona):
    return as_persona("viewer")


def bulk_nodes(n: int, *, prefix: str = "n") -> list[Node]:
    """`n` nodes in bulk: states repeat (ties), every third never reported (NULL last_seen),
    creation times collide in pairs."""
    h100 = HardwareProfile.objects.get(slug="h100-sxm")
    base = timezone.now() - timedelta(hours=1)
    rows = [
        Node(
            name=f"{prefix}-{(i * 7919) % 1000:03d}-{i}",  # names not in id order
            profile=h100,
            roles=["verify"],
            state=STATES[i % len(STATES)],
            last_seen=None if i % 3 == 0 else base + timedelta(seconds=(i * 37) % 11),
            created=base + timedelta(seconds=i // 2),
        )
        for i in range(n)
    ]
    Node.objects.bulk_create(rows)
    return list(Node.objects.filter(name__startswith=f"{prefix}-"))


def expected(nodes: list[Node], ordering: str) -> list[int]:
    field = ordering.lstrip("-")
    desc = ordering.startswith("-")
    present = [n for n in nodes if getattr(n, field) is not None]
    nulls = [n for n in nodes if getattr(n, field) is None]
    present.sort(key=lambda n: (getattr(n, field), n.pk), reverse=desc)
    nulls.sort(key=lambda n: n.pk, reverse=desc)
    return [n.pk for n in present + nulls]


def walk(client, url: str, direction: str = "next") -> list[list[int]]:
    pages = []
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content
        body = response.json()
        pages.append([row["id"] for row in body["results"]])
        url = body[direction]
    return pages


@pytest.mark.parametrize(
    "ordering",
    ["name", "-name", "state", "-state", "last_seen", "-last_seen", "created", "-updated"],
)
def test_walking_forward_and_back_gives_every_node_once_in_order(alice, ordering):
    nodes = bulk_nodes(23)
    pages = walk(alice, f"/api/v1/nodes?ordering={ordering}&limit=4")
    assert [len(p) for p in pages] == [4, 4, 4, 4, 4, 3]
    assert [pk for page in pages for pk in page] == expected(nodes, ordering)
    last = alice.get(f"/api/v1/nodes?ordering={ordering}&limit=4")
    for _ in range(5):
        last = alice.get(last.json()["next"])
    assert last.json()["next"] is None
    back = walk(alice, last.json()["previous"], direction="previous")
    assert back == pages[-2::-1]  # the same pages, last but one to the first


def test_filters_and_search_combine_with_the_cursor(alice):
    nodes = bulk_nodes(30)
    online = [n for n in nodes if n.state == "online"]
    pages = walk(alice, "/api/v1/nodes?state=online&ordering=-last_seen&limit=3")
    assert [pk for page in pages for pk in page] == expected(online, "-last_seen")


def test_rows_added_while_walking_are_neither_repeated_nor_skip_others(alice):
    nodes = bulk_nodes(12)
    first = alice.get("/api/v1/nodes?limit=5").json()  # by name
    bulk_nodes(3, prefix="a")  # sort before the cursor
    bulk_nodes(3, prefix="z")  # after it
    rest = walk(alice, first["next"])
    seen = [row["id"] for row in first["results"]] + [pk for page in rest for pk in page]
    assert len(seen) == len(set(seen))
    assert {n.pk for n in nodes} <= set(seen)
    assert Node.objects.filter(name__startswith="z-").count() == 3
    assert set(Node.objects.filter(name__startswith="z-").values_list("pk", flat=True)) <= set(seen)


@pytest.mark.parametrize(
    "query,field",
    [
        ("offset=10", "offset"),
        ("cursor=not-a-cursor", "cursor"),
        ("cursor=eyJ2IjoxfQ", "cursor"),  # JSON without an id
        ("ordering=address", "ordering"),
        ("ordering=state,name", "ordering"),
        ("limit=zero", "limit"),
        ("limit=0", "limit"),
    ],
)
def test_bad_paging_parameters_are_400(alice, query, field):
    response = alice.get(f"/api/v1/nodes?{query}")
    assert response.status_code == 400
    assert field in response.json()


def _cursor(payload: dict) -> str:
    import base64
    import json

    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()


@pytest.mark.parametrize(
    "payload",
    [
        {"o": "name", "v": {"$gt": ""}, "id": 1},  # a value that is no value
        {"o": "name", "v": ["a"], "id": 1},
        {"o": "name", "v": "a", "id": "1"},
        {"o": "name", "v": "a", "id": True},
        {"o": "-name", "v": "a", "id": 1},  # another ordering's cursor
        {"v": "a", "id": 1},
        {"o": "last_seen", "v": "not a time", "id": 1},
        {"o": "pk", "v": "not a number", "id": 1},
    ],
)
def test_tampered_cursors_are_400(alice, payload):
    bulk_nodes(3)
    ordering = {"last_seen": "last_seen", "pk": "id"}.get(payload.get("o", ""), "name")
    response = alice.get(f"/api/v1/nodes?ordering={ordering}&cursor={_cursor(payload)}")
    assert response.status_code == 400
    assert "cursor" in response.json()


def test_a_page_is_capped_at_the_maximum(alice):
    from fleet.guard.rest import MAX_PAGE_SIZE

    bulk_nodes(MAX_PAGE_SIZE + 3)
    body = alice.get("/api/v1/nodes", {"limit": 10**6}).json()
    assert len(body["results"]) == MAX_PAGE_SIZE and body["next"]


def test_any_page_of_any_fleet_costs_the_same_queries(alice, django_assert_num_queries):
    alice.get("/api/v1/nodes")  # warm up: the persona's role lookup, API key last-used
    bulk_nodes(12)
    with django_assert_num_queries(3) as small:
        first = alice.get("/api/v1/nodes?limit=5&ordering=state&state=online&state=lost")
    sql = [q["sql"].upper() for q in small.captured_queries]
    bulk_nodes(400, prefix="m")
    deep = alice.get("/api/v1/nodes?limit=50&ordering=-last_seen")
    for _ in range(3):
        deep = alice.get(deep.json()["next"])
    with django_assert_num_queries(len(sql)):
        page = alice.get(deep.json()["next"])
    assert len(page.json()["results"]) == 50 and len(first.json()["results"]) == 5
    assert not any("COUNT(" in q or "OFFSET" in q for q in sql)
    assert not any("DISTINCT" in q for q in sql)  # a state filter sorted every column on PG
