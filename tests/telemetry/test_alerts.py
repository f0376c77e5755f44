"""Tandem's own alert evaluation (fleet.telemetry.alerts) and its firing/resolved record
(fleet.telemetry.alert_state): each condition fires, and resolves when it stops."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.nodes.models import Node
from fleet.runtime.supervision import state_path, write_state
from fleet.telemetry import alert_state, alerts
from fleet.telemetry.models import AlertState, Rollup
from tests.factories import make_pipeline, online_node, place

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_supervisor(settings, tmp_path):
    settings.DATA_DIR = tmp_path  # no state file unless a test writes one


def keys(now=None) -> list[str]:
    return [a.key for a in alerts.firing(now)]


def buckets(pipeline, figures: list[dict], now=None) -> None:
    """10 s pipeline rollups ending at `now`, oldest first."""
    now = now or timezone.now()
    Rollup.objects.bulk_create(
        Rollup(
            scope="pipeline",
            scope_id=pipeline.pk,
            resolution_s=10,
            start=now - timedelta(seconds=10 * (len(figures) - i)),
            data=data,
        )
        for i, data in enumerate(figures)
    )


def test_a_placed_node_with_a_stale_heartbeat_fires_and_resolves_when_seen_again():
    pipeline = make_pipeline(name="chat")
    node = online_node(name="v1")
    place(pipeline, node, "verify")
    unplaced = online_node(name="spare")  # not placed: a lost spare is no alert here
    assert keys() == []
    stale = timezone.now() - Node.liveness_window() - timedelta(seconds=5)
    Node.objects.filter(pk__in=[node.pk, unplaced.pk]).update(last_seen=stale)
    [alert] = alerts.firing()
    assert (alert.key, alert.name) == (f"node_lost:{node.pk}", "TandemNodeLost")
    assert (alert.node_id, alert.pipeline_id) == (node.pk, pipeline.pk)
    assert "v1" in alert.summary and "chat" in alert.summary

    t0 = timezone.now()
    [row] = alert_state.sync(t0)
    assert row.first_seen == t0 and row.resolved_at is None
    alert_state.sync(t0 + timedelta(seconds=5))  # still firing: the same row, the same since
    assert AlertState.objects.get().first_seen == t0

    Node.objects.filter(pk=node.pk).update(last_seen=timezone.now())
    t1 = timezone.now()
    assert alert_state.sync(t1) == []
    assert AlertState.objects.get().resolved_at == t1
    listing = alert_state.listing()
    assert listing["firing"] == [] and [r.key for r in listing["resolved"]] == [alert.key]

    # lost again: a new firing, the old one stays resolved
    Node.objects.filter(pk=node.pk).update(last_seen=stale)
    alert_state.sync()
    assert AlertState.objects.count() == 2 and alert_state.firing_count() == 1


def test_a_node_marked_lost_fires_and_a_retired_one_does_not():
    pipeline = make_pipeline()
    lost, retired = online_node(), online_node()
    place(pipeline, lost, "verify")
    place(pipeline, retired, "draft")
    Node.objects.filter(pk=lost.pk).update(state="lost")
    Node.objects.filter(pk=retired.pk).update(state="retired", last_seen=None)
    assert keys() == [f"node_lost:{lost.pk}"]


def test_no_goodput_fires_only_when_requests_wait_and_nothing_is_delivered():
    pipeline = make_pipeline()
    starving = {"waiting": 3.0, "tokens_per_s": 0.0}
    buckets(pipeline, [starving] * 2)
    assert keys() == []  # too few buckets to tell
    Rollup.objects.all().delete()
    buckets(pipeline, [starving] * 5)
    assert keys() == [f"no_goodput:{pipeline.pk}"]
    Rollup.objects.all().delete()
    buckets(pipeline, [starving] * 4 + [{"waiting": 3.0, "tokens_per_s": 120.0}])
    assert keys() == []  # it delivered in the last window
    Rollup.objects.all().delete()
    buckets(pipeline, [{"waiting": 0.0, "tokens_per_s": 0.0}] * 5)
    assert keys() == []  # idle, not starving


def test_itl_and_ttft_slo_burn_fire_over_the_pipelines_slo_only():
    pipeline = make_pipeline(slo_itl_p99_ms=50.0, slo_ttft_p99_ms=400.0)
    no_slo = make_pipeline()
    slow = {"itl_p99_ms": 80.0, "ttft_p99_ms": 300.0}
    buckets(pipeline, [slow] * 6)
    buckets(no_slo, [slow] * 6)
    [alert] = alerts.firing()
    assert (alert.key, alert.name) == (f"itl_slo:{pipeline.pk}", "TandemITLSLOBurnFast")
    assert "80 ms" in alert.summary and "50 ms" in alert.summary
    # the burn stops: most recent buckets back under the SLO
    Rollup.objects.all().delete()
    buckets(pipeline, [slow] * 2 + [{"itl_p99_ms": 30.0, "ttft_p99_ms": 500.0}] * 4)
    assert keys() == [f"ttft_slo:{pipeline.pk}"]
    # buckets older than the window do not count
    Rollup.objects.all().delete()
    buckets(pipeline, [slow] * 6, now=timezone.now() - alerts.SLO_WINDOW - timedelta(minutes=1))
    assert keys() == []


def test_a_child_given_up_fires_a_restarting_one_does_not(settings, tmp_path):
    children = [
        {"name": "node-verify", "state": "failed", "pid": None, "since": time.time()},
        {"name": "aggregator", "state": "restarting", "pid": None, "since": time.time()},
        {"name": "web", "state": "running", "pid": 1, "since": time.time()},
    ]
    write_state(state_path(tmp_path), {"children": children})
    assert keys() == ["child_given_up:node-verify"]
    write_state(state_path(tmp_path), {"children": children[1:]})
    assert keys() == []


def test_sync_opens_one_row_per_key_even_when_called_twice_with_the_same_findings():
    found = [alerts.Alert(key="x:1", name="TandemNodeLost", severity="page", summary="s")]
    alert_state.sync(found=found)
    alert_state.sync(found=found)
    assert AlertState.objects.filter(resolved_at=None).count() == 1


def test_beat_runs_the_evaluation(settings):
    from fleet.telemetry.tasks import telemetry_evaluate_alerts

    entry = settings.CELERY_BEAT_SCHEDULE["evaluate-alerts"]
    assert entry["task"] == telemetry_evaluate_alerts.name and entry["schedule"] <= 10
    pipeline = make_pipeline()
    node = online_node()
    place(pipeline, node, "verify")
    Node.objects.filter(pk=node.pk).update(state="lost")
    assert telemetry_evaluate_alerts() == 1
    assert AlertState.objects.get(resolved_at=None).key == f"node_lost:{node.pk}"
