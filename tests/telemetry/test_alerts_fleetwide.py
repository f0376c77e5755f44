"""The fleet-wide rules Tandem evaluates from what /metrics would answer
(fleet.telemetry.alerts.fleetwide), the pending state of a rule whose `for:` only waiting can
show (alert_state), and the rules table against compose/prometheus/alerts.yml.

The unit tests fake the scrape; the others go through the real parts: a real aggregator core
taking real signed (and forged) samples, its snapshot in the test run's real Redis, and a Redis
that does not answer."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from django.utils import timezone

from fleet.telemetry import alert_state, alerts
from fleet.telemetry.aggregator import Aggregator
from fleet.telemetry.alerts import fleetwide
from fleet.telemetry.alerts.fleetwide import Scrape
from fleet.telemetry.ingest import client, encode
from fleet.telemetry.models import AlertPending, AlertState
from fleet.telemetry.registry import load_registry
from fleet.telemetry.snapshot import LIVE_KEY
from tests.telemetry import factories as f

pytestmark = pytest.mark.django_db

RULES_FILE = Path(__file__).resolve().parents[2] / "compose" / "prometheus" / "alerts.yml"


@pytest.fixture(autouse=True)
def _clean(settings, tmp_path):
    """No supervisor; no counters left by another test (some are scored in the future)."""
    settings.DATA_DIR = tmp_path
    client().delete(fleetwide.COUNTERS_KEY)
    yield
    client().delete(fleetwide.COUNTERS_KEY, LIVE_KEY)


def at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def scrape(*, tick: float | None, reachable: bool = True) -> Scrape:
    samples: dict[str, list[tuple[dict[str, str], float]]] = (
        {fleetwide.LAST_TICK: [({}, tick)]} if tick is not None else {}
    )
    return Scrape(reachable, "" if reachable else "Connection refused", samples)


# --- unit: faked scrapes ---------------------------------------------------------------------


def test_telemetry_lag_fires_when_the_last_tick_is_over_30s_plus_1m_old():
    now = timezone.now()
    assert fleetwide.telemetry_lag(scrape(tick=now.timestamp() - 89), now) == []
    [alert] = fleetwide.telemetry_lag(scrape(tick=now.timestamp() - 91), now)
    assert (alert.key, alert.name, alert.severity, alert.hold_s) == (
        "telemetry_lag",
        "TandemTelemetryLag",
        "page",
        0,
    )
    assert fleetwide.telemetry_lag(scrape(tick=None), now) == []  # absent: MetricsDown's
    assert fleetwide.telemetry_lag(scrape(tick=now.timestamp()), now) == []  # it ticked again


def test_metrics_down_is_redis_unreachable_or_no_tick_and_holds_2_minutes():
    assert fleetwide.metrics_down(scrape(tick=time.time())) == []
    [absent] = fleetwide.metrics_down(scrape(tick=None))
    assert "no aggregator tick" in absent.summary and absent.hold_s == 120
    [down] = fleetwide.metrics_down(scrape(tick=None, reachable=False))
    assert "Redis unreachable (Connection refused)" in down.summary


def test_the_dropped_rate_reads_counter_increases_with_resets(monkeypatch):
    assert fleetwide.increase([5, 7, 10]) == 5
    assert fleetwide.increase([5, 7, 2, 4]) == 2 + 2 + 2  # reset at 2: rate()'s reading
    now = timezone.now()
    points = [(0, 100.0, {"bad_signature": 0.0}), (60, 200.0, {"bad_signature": 10.0})]
    monkeypatch.setattr(fleetwide, "counters", lambda now: points)
    assert fleetwide.telemetry_dropped(scrape(tick=1.0), now) == []  # 10 of 100: not over
    points[1] = (60, 200.0, {"bad_signature": 11.0, "stale": 1.0})
    [alert] = fleetwide.telemetry_dropped(scrape(tick=1.0), now)
    assert (alert.name, alert.severity, alert.hold_s) == ("TandemTelemetryDropped", "ticket", 600)
    assert "12 telemetry samples dropped" in alert.summary
    assert "bad_signature 11, stale 1" in alert.summary


def test_a_held_condition_waits_its_for_as_pending_then_fires_and_resolves():
    held = alerts.Alert(
        key="metrics_down", name="TandemMetricsDown", severity="page", summary="s", hold_s=120
    )
    t0 = timezone.now()
    assert alert_state.sync(t0, found=[held]) == []
    [row] = alert_state.pending(t0)
    assert (row.key, row.since, row.fires_at) == ("metrics_down", t0, t0 + timedelta(minutes=2))
    assert alert_state.sync(t0 + timedelta(seconds=119), found=[held]) == []
    [firing] = alert_state.sync(t0 + timedelta(seconds=120), found=[held])
    assert firing.key == "metrics_down" and firing.first_seen == t0 + timedelta(seconds=120)
    assert alert_state.pending(t0 + timedelta(seconds=121)) == []  # fired: no longer pending
    assert alert_state.sync(t0 + timedelta(seconds=130), found=[]) == []
    assert AlertState.objects.get().resolved_at == t0 + timedelta(seconds=130)
    assert not AlertPending.objects.exists()
    # a condition that stops while pending never fires, and starts its wait afresh
    alert_state.sync(t0 + timedelta(seconds=200), found=[held])
    alert_state.sync(t0 + timedelta(seconds=250), found=[])
    alert_state.sync(t0 + timedelta(seconds=300), found=[held])
    assert alert_state.sync(t0 + timedelta(seconds=330), found=[held]) == []
    assert AlertPending.objects.get().since == t0 + timedelta(seconds=300)


def test_tandems_rules_are_the_11_of_alerts_yml_with_their_severity_and_for():
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    shipped = {
        r["alert"]: (r["labels"]["severity"], r.get("for", "")) for g in groups for r in g["rules"]
    }
    ours = {r.name: (r.severity, r.hold) for r in alerts.RULES}
    assert len(ours) == len(alerts.RULES) == 11
    assert ours == shipped


# --- the real parts: an aggregator's snapshot in Redis, a Redis that does not answer ---------


def _tick(agg: Aggregator, ts: float) -> None:
    """What the aggregator's tick writes: its snapshot (meta included) in Redis."""
    client().hset(LIVE_KEY, mapping=agg.build(ts)["snapshot"])


def test_dropped_samples_through_a_real_aggregator_fire_after_10_minutes_and_resolve():
    pipeline = f.pipeline(name="chat")
    node, token = f.node(name="gpu-1")
    f.place(node, pipeline, "verify")
    base = float(int(time.time()))  # whole seconds: the tick 5 min back is on the edge, in
    agg = Aggregator(clock=lambda: base)
    agg.set_registry(load_registry())

    def minute(i: int, *, forged: bool) -> datetime:
        ts = base + 60 * i
        for j in range(2):
            sample = f.verify_sample(ts=ts + j)
            agg.ingest_entry(encode(node.id, sample, key=f.key_of(node.id, token)), now=ts + j)
        if forged:  # signed with a key that is not the node's
            bad = encode(node.id, f.verify_sample(ts=ts + 2), key=f.key_of(node.id, "tdn_x"))
            assert not agg.ingest_entry(bad, now=ts + 2)
        _tick(agg, ts + 2.5)
        return at(ts + 2.5)

    for i in range(11):  # one sample in three forged, every minute
        now = minute(i, forged=True)
        assert alert_state.sync(now) == []
        names = [r.name for r in alert_state.pending(now)]
        assert names == ([] if i == 0 else ["TandemTelemetryDropped"])  # a rate needs 2 points
    [row] = alert_state.sync(minute(11, forged=True))  # 10 minutes since it first held
    assert (row.name, row.severity) == ("TandemTelemetryDropped", "ticket")
    assert "bad_signature 5" in row.summary  # one a minute over the 5-minute window
    assert agg.dropped["bad_signature"] == 12

    # the forger stops: the 5-minute window still holds 4, 3, 2 of its samples against the
    # 10 taken, then 1 (not over 10 %)
    for i in range(12, 15):
        assert [r.name for r in alert_state.sync(minute(i, forged=False))] == [row.name]
    assert alert_state.sync(minute(15, forged=False)) == []
    assert AlertState.objects.get().resolved_at is not None
    assert not AlertPending.objects.exists()


def test_telemetry_lag_through_the_aggregators_snapshot():
    now = time.time()
    _tick(Aggregator(clock=lambda: now - 100), now - 100)
    assert [a.name for a in alerts.firing(at(now))] == ["TandemTelemetryLag"]
    _tick(Aggregator(clock=lambda: now), now)
    assert alerts.firing(at(now)) == []


def test_metrics_down_when_redis_does_not_answer_and_when_no_aggregator_ticked(settings):
    real_redis = settings.REDIS_URL
    t0 = timezone.now()
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    assert alert_state.sync(t0) == []
    [pending] = alert_state.pending(t0)
    assert pending.name == "TandemMetricsDown" and "Redis unreachable" in pending.summary
    [row] = alert_state.sync(t0 + timedelta(minutes=2))
    assert row.name == "TandemMetricsDown" and "Redis unreachable" in row.summary

    settings.REDIS_URL = real_redis  # Redis answers, but no aggregator has written a tick
    [row] = alert_state.sync(t0 + timedelta(minutes=3))
    assert "no aggregator tick" in row.summary  # the same condition, told anew
    later = t0 + timedelta(minutes=3, seconds=5)
    _tick(Aggregator(clock=later.timestamp), later.timestamp())
    assert alert_state.sync(later) == []
    assert AlertState.objects.get().resolved_at is not None
