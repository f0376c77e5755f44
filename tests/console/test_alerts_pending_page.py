"""The /alerts page beyond firing and resolved: a condition waiting out its rule's `for:` shows as
pending (not counted as firing), and every one of the 11 rules is listed with how Tandem reads
it, the part only Prometheus sees said so."""

from __future__ import annotations

import pytest
from django.test import Client

from fleet.telemetry.alerts.fleetwide import COUNTERS_KEY
from fleet.telemetry.ingest import client
from fleet.telemetry.snapshot import LIVE_KEY
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_aggregator(settings, tmp_path):
    """No supervisor, and no aggregator has written a tick: TandemMetricsDown holds."""
    settings.DATA_DIR = tmp_path
    client().delete(LIVE_KEY, COUNTERS_KEY)


def test_a_held_condition_shows_as_pending_and_every_rule_is_listed(viewer):
    c = Client()
    assert c.login(username=viewer.username, password=PASSWORD)
    html = c.get("/alerts/").content.decode()
    firing, rest = html.split('id="alerts-pending"')
    assert "Nothing is firing." in firing
    pending, rules = rest.split('id="alert-rules"')
    assert 'data-alert="metrics_down" data-state="pending"' in pending
    assert "no aggregator tick" in pending and "pending: fires at" in pending
    assert rules.count("<tr data-rule=") == 11
    down = rules.split('data-rule="TandemMetricsDown"')[1].split("</tr>")[0]
    assert "evaluated by Prometheus only" in down and "pending" in down
    assert "alert firing" not in c.get("/").content.decode()  # pending is not firing
