"""The fleet page's first rows sorted by a live figure (`?sort=tps&dir=desc`, issue 24): read
from the figures the feed keeps in Redis, the same order the page's script then keeps, with the
filters applied, in a constant number of queries; aria-sort names the order they are in."""

import json
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from fleet.console.selectors import FLEET_FIRST_ROWS
from fleet.nodes.models import Node
from fleet.pipelines.models import Placement
from fleet.telemetry import feed
from fleet.telemetry.deltas import FIG_FIELDS
from fleet.telemetry.ingest import client
from fleet.telemetry.snapshot import LIVE_KEY
from tests.factories import PASSWORD
from tests.telemetry import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def clean_live_state():
    client().delete(LIVE_KEY, feed.FIGS_KEY)
    yield
    client().delete(feed.FIGS_KEY)


def _fleet(n: int) -> list[Node]:
    """n verifiers named node-00000...; every fourth one a drafter of the same pipeline."""
    gpu = f.profile()
    Node.objects.bulk_create(
        [Node(name=f"node-{i:05d}", profile=gpu, roles=["verify"]) for i in range(n)]
    )
    nodes = list(Node.objects.order_by("name"))
    p = f.pipeline()
    Placement.objects.bulk_create(
        [
            Placement(node=node, pipeline=p, role="draft" if i % 4 == 3 else "verify")
            for i, node in enumerate(nodes)
        ]
    )
    return nodes


def _publish(figs: dict[int, dict]) -> None:
    """The figures hash as the feed's publisher writes it (deltas.figures_of's lists)."""
    client().hset(
        feed.FIGS_KEY,
        mapping={str(nid): json.dumps([v.get(k) for k in FIG_FIELDS]) for nid, v in figs.items()},
    )


def _page(user, query: str) -> tuple[list[int], str, int]:
    c = Client()
    assert c.login(username=user.username, password=PASSWORD)
    with CaptureQueriesContext(connection) as queries:
        body = c.get(f"/fleet/{query}").content.decode()
    ids = [int(i) for i in re.findall(r'<tr data-id="(\d+)"', body)]
    return ids, body, len(queries)


def _aria(body: str) -> list[tuple[str, str]]:
    return re.findall(r'data-sort="(\w+)" tabindex="0" aria-sort="(\w+)"', body)


def test_the_first_rows_are_the_highest_figures_and_the_nodes_without_come_last(viewer):
    nodes = _fleet(120)
    # verifiers' tokens/s rise with the name; drafters deliver none (the table shows "—")
    figs = {
        n.pk: {"tps": 0.0 if i % 4 == 3 else 100.0 + i, "power_w": 500 - i, "seen": 1}
        for i, n in enumerate(nodes)
    }
    del figs[nodes[118].pk]  # a verifier without a sample yet
    _publish(figs)
    verifiers = [n.pk for i, n in enumerate(nodes) if i % 4 != 3 and i != 118]
    ids, body, queries = _page(viewer, "?sort=tps&dir=desc")
    assert ids == verifiers[::-1][:FLEET_FIRST_ROWS]
    assert _aria(body) == [("tps", "descending")]
    ids, body, _ = _page(viewer, "?sort=tps&dir=asc")
    assert ids == verifiers[:FLEET_FIRST_ROWS]
    assert _aria(body) == [("tps", "ascending")]
    # the nodes without the figure last in both directions, by name among themselves
    ids, _, _ = _page(viewer, "?sort=tps&dir=desc&q=node-0011")  # node-00110 ... 00119
    lacking = [nodes[i].pk for i in (111, 115, 118, 119)]
    assert ids == [nodes[i].pk for i in (117, 116, 114, 113, 112, 110)] + lacking
    # power: every node has it, drafters too
    ids, _, _ = _page(viewer, "?sort=power&dir=asc")
    assert ids == [n.pk for n in nodes if n.pk != nodes[118].pk][::-1][:FLEET_FIRST_ROWS]
    # a bigger fleet: the same number of queries
    more = Node.objects.bulk_create(
        [Node(name=f"more-{i:05d}", profile=nodes[0].profile) for i in range(300)]
    )
    _publish({n.pk: {"tps": 1.0} for n in more})
    ids, _, more_queries = _page(viewer, "?sort=tps&dir=desc")
    assert more_queries == queries and len(ids) == FLEET_FIRST_ROWS


def test_the_filters_in_the_url_apply_before_the_order(viewer):
    nodes = _fleet(40)
    Node.objects.filter(pk__in=[nodes[0].pk, nodes[8].pk, nodes[20].pk]).update(state="draining")
    _publish({n.pk: {"acc": round(0.5 + i / 100, 3)} for i, n in enumerate(nodes) if i % 4 != 3})
    ids, body, _ = _page(viewer, "?state=draining&role=verify&sort=acc&dir=asc")
    assert ids == [nodes[0].pk, nodes[8].pk, nodes[20].pk]
    assert '<span id="shown">3</span>' in body
    ids, _, _ = _page(viewer, "?role=draft&sort=acc&dir=desc")  # none has one: by name
    assert ids == [n.pk for i, n in enumerate(nodes) if i % 4 == 3]


def test_the_age_of_the_last_sample_sorts_stalest_first_descending(viewer):
    nodes = _fleet(3)
    _publish({nodes[0].pk: {"seen": 2_000_000_000}, nodes[1].pk: {"seen": 1_000_000_000}})
    ids, _, _ = _page(viewer, "?sort=seen&dir=desc")
    assert ids == [nodes[1].pk, nodes[0].pk, nodes[2].pk]


def test_without_figures_or_with_a_field_sort_the_first_rows_are_by_name(viewer):
    nodes = _fleet(5)
    by_name = [n.pk for n in nodes]
    ids, body, _ = _page(viewer, "?sort=tps&dir=desc")  # no publisher: no figure anywhere
    assert ids == by_name and _aria(body) == [("tps", "descending")]
    ids, body, _ = _page(viewer, "?sort=name&dir=desc")
    assert ids == by_name[::-1] and _aria(body) == [("name", "descending")]
    # state, role and pipeline are the script's to order: these rows are by name, and say so
    ids, body, _ = _page(viewer, "?sort=state&dir=desc")
    assert ids == by_name and _aria(body) == [("name", "ascending")]
    ids, body, _ = _page(viewer, "?sort=bogus")
    assert ids == by_name and _aria(body) == [("name", "ascending")]
    assert body.count('tabindex="0"') >= 10  # every header sorts from the keyboard
