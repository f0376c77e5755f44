"""The fleet page's first render at fleet scale: the headline, the counts and the first rows
only (the page's script loads every row from the websocket), in a constant number of queries."""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from fleet.console.selectors import FLEET_FIRST_ROWS
from fleet.nodes.models import Node
from fleet.pipelines.models import Placement
from fleet.telemetry.ingest import client
from fleet.telemetry.snapshot import LIVE_KEY
from tests.factories import PASSWORD
from tests.telemetry import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def clean_live_state():
    client().delete(LIVE_KEY)


def _login(user) -> Client:
    c = Client()
    assert c.login(username=user.username, password=PASSWORD)
    return c


def _nodes(n: int, start: int = 0, state: str = "online") -> None:
    gpu = f.profile()
    Node.objects.bulk_create(
        [
            Node(name=f"node-{i:05d}", profile=gpu, roles=["verify"], state=state)
            for i in range(start, start + n)
        ]
    )


def _page(user, query: str = "") -> tuple[str, int]:
    c = _login(user)
    with CaptureQueriesContext(connection) as queries:
        body = c.get(f"/fleet/{query}").content.decode()
    return body, len(queries)


def test_the_first_render_has_the_first_rows_and_the_counts_only(viewer):
    _nodes(FLEET_FIRST_ROWS + 70)
    body, queries = _page(viewer)
    assert body.count("<tr data-id=") == FLEET_FIRST_ROWS
    assert "node-00000" in body and f"node-{FLEET_FIRST_ROWS - 1:05d}" in body
    assert f"node-{FLEET_FIRST_ROWS:05d}" not in body  # the rest comes from the websocket
    total = FLEET_FIRST_ROWS + 70
    assert f'<span id="shown">{total}</span> of <span id="total">{total}</span>' in body
    assert f'data-k="nodes">{total}<' in body
    _nodes(400, start=1000)
    body, more_queries = _page(viewer)
    assert body.count("<tr data-id=") == FLEET_FIRST_ROWS
    assert more_queries == queries  # whatever the fleet's size


def test_filters_in_the_url_apply_to_the_first_render(viewer):
    _nodes(80)
    _nodes(3, start=500, state="lost")
    p = f.pipeline()
    Placement.objects.create(node=Node.objects.get(name="node-00007"), pipeline=p, role="verify")
    body, _ = _page(viewer, "?state=lost")
    assert body.count("<tr data-id=") == 3 and "node-00500" in body
    assert '<span id="shown">3</span> of <span id="total">83</span>' in body
    body, _ = _page(viewer, f"?pipeline={p.pk}&role=verify")
    assert body.count("<tr data-id=") == 1 and "node-00007" in body
    body, _ = _page(viewer, "?pipeline=abc")  # not an id: nothing matches, no error
    assert body.count("<tr data-id=") == 0 and "No node matches these filters." in body
    body, _ = _page(viewer, "?q=node-0000&sim=real")
    assert body.count("<tr data-id=") == 10
    assert 'value="real" selected' in body
