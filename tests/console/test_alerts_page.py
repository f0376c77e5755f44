"""The /alerts page through the real view: who may read it, what it lists, and the count on the
home page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from fleet.nodes.models import Node
from fleet.telemetry.alerts.fleetwide import COUNTERS_KEY
from fleet.telemetry.ingest import client
from fleet.telemetry.models import AlertState
from fleet.telemetry.snapshot import LIVE_KEY
from tests.factories import PASSWORD
from tests.telemetry import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_supervisor(settings, tmp_path):
    settings.DATA_DIR = tmp_path


@pytest.fixture(autouse=True)
def _no_aggregator_left():
    """No snapshot an earlier test's aggregator left in Redis: its old tick would fire
    TandemTelemetryLag beside the alerts these tests count."""
    client().delete(LIVE_KEY, COUNTERS_KEY)


def _login(user) -> Client:
    c = Client()
    assert c.login(username=user.username, password=PASSWORD)
    return c


def test_anonymous_is_sent_to_login_and_an_outsider_is_refused(outsider):
    response = Client().get("/alerts/")
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert _login(outsider).get("/alerts/").status_code == 403


@pytest.mark.parametrize("persona", ["viewer", "operator", "admin"])
def test_every_role_reads_the_list_firing_then_resolved(personas, persona):
    p = f.pipeline(name="chat")
    lost, _ = f.node(name="gpu-1")
    f.place(lost, p, "verify")
    stale = timezone.now() - Node.liveness_window() - timedelta(seconds=5)
    Node.objects.filter(pk=lost.pk).update(last_seen=stale)
    AlertState.objects.create(  # resolved an hour ago; a pipeline since deleted: no link
        key="no_goodput:999",
        name="TandemPipelineNoGoodput",
        severity="page",
        summary="gone delivers no tokens while requests wait",
        pipeline_id=999,
        first_seen=timezone.now() - timedelta(hours=2),
        resolved_at=timezone.now() - timedelta(hours=1),
    )
    c = _login(personas[persona])
    html = c.get("/alerts/").content.decode()
    firing, resolved = html.split('id="alerts-resolved"')
    assert f'data-alert="node_lost:{lost.pk}" data-state="firing"' in firing
    assert f'href="/nodes/{lost.pk}/"' in firing and f'href="/pipelines/{p.pk}/"' in firing
    assert 'data-alert="no_goodput:999" data-state="resolved"' in resolved
    assert "/pipelines/999/" not in resolved
    assert "1 alert firing" in c.get("/").content.decode()
