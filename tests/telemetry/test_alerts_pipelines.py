"""The pipeline rules Tandem evaluates from its rollups (fleet.telemetry.alerts.pipelines): the
acceptance collapse and the slow ITL / TTFT burns fire on their condition, wait out their
`for:` on the history, and resolve (through alert_state.sync) when the condition clears; the
fast burn needs its long window too. Rollups are written as the aggregator writes them."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from fleet.pipelines.models import Pipeline
from fleet.telemetry import alert_state, alerts
from fleet.telemetry.alerts import pipelines
from fleet.telemetry.models import AlertState, Rollup
from tests.factories import make_pipeline

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_supervisor(settings, tmp_path):
    settings.DATA_DIR = tmp_path


def rollups(pipeline, resolution: int, figures: list[dict], end: datetime) -> None:
    """`resolution` s pipeline rollups, oldest first, the last one starting `resolution`
    before `end`."""
    Rollup.objects.bulk_create(
        Rollup(
            scope="pipeline",
            scope_id=pipeline.pk,
            resolution_s=resolution,
            start=end - timedelta(seconds=resolution * (len(figures) - i)),
            data=data,
        )
        for i, data in enumerate(figures)
    )


def names(now=None) -> set[tuple[str, int | None]]:
    return {(a.name, a.pipeline_id) for a in alerts.firing(now)}


def test_acceptance_under_half_its_6h_mean_for_10_minutes_fires_and_resolves():
    pipeline = make_pipeline(name="chat")
    now = timezone.now()
    rollups(pipeline, 300, [{"acceptance_rate": 0.7}] * 72, now)  # 6 h at 70 %
    five_minutes = [{"acceptance_rate": 0.2}] * 30
    rollups(pipeline, 10, five_minutes, now)
    assert names(now) == set()  # 5 minutes of collapse: not yet the rule's 10
    Rollup.objects.filter(resolution_s=10).delete()
    rollups(pipeline, 10, [{"acceptance_rate": 0.2}] * 60, now)
    [alert] = alerts.firing(now)
    assert (alert.key, alert.name, alert.severity) == (
        f"acceptance_collapse:{pipeline.pk}",
        "TandemAcceptanceCollapse",
        "ticket",
    )
    assert alert.pipeline_id == pipeline.pk
    assert "acceptance 20%" in alert.summary and "6 h mean of 70%" in alert.summary
    [row] = alert_state.sync(now)
    assert row.key == alert.key

    # one bucket of the last 10 minutes back over half the mean: it no longer holds
    Rollup.objects.filter(resolution_s=10, start__gte=now - timedelta(seconds=30)).update(
        data={"acceptance_rate": 0.6}
    )
    assert alert_state.sync(now + timedelta(seconds=1)) == []
    assert AlertState.objects.get(key=alert.key).resolved_at is not None


def test_the_6h_mean_weighs_5_minute_and_10_second_buckets_by_their_time():
    pipeline = make_pipeline()
    now = timezone.now()
    rollups(pipeline, 300, [{"acceptance_rate": 0.6}] * 2, now - timedelta(minutes=5))
    rollups(pipeline, 10, [{"acceptance_rate": 0.9}] * 30, now)  # after the last 5 min one
    rollups(pipeline, 10, [{"acceptance_rate": 0.0}] * 30, now - timedelta(minutes=5))  # covered
    buckets = pipelines._buckets([pipeline.pk], 10, now - timedelta(hours=1))[pipeline.pk]
    fives = pipelines._buckets([pipeline.pk], 300, now - timedelta(hours=7))[pipeline.pk]
    mean = pipelines.mean_acceptance(buckets, fives, now)
    assert mean == pytest.approx((0.6 * 600 + 0.9 * 300) / 900)


@pytest.mark.parametrize(
    "kind,field,slo",
    [("ITL", "itl_p99_ms", "slo_itl_p99_ms"), ("TTFT", "ttft_p99_ms", "slo_ttft_p99_ms")],
)
def test_a_slow_burn_fires_once_both_windows_held_15_minutes_and_resolves(kind, field, slo):
    pipeline = make_pipeline()
    Pipeline.objects.filter(pk=pipeline.pk).update(**{slo: 100.0})
    now = timezone.now()
    slow, fine = {field: 150.0}, {field: 40.0}
    rollups(pipeline, 300, [slow] * 75, now)  # 6 h 15 min over the SLO
    rollups(pipeline, 10, [fine] * 150, now - timedelta(minutes=20))
    rollups(pipeline, 10, [slow] * 120, now)  # the last 20 minutes over
    key = (f"Tandem{kind}SLOBurnSlow", pipeline.pk)
    # the 30 min window burns now (20 of its 30 minutes), not 15 minutes ago (5 of 30)
    ten, five = _rows(pipeline, now)
    window = pipelines.SLOW_WINDOW
    assert pipelines.slo_burning(pipelines._window(ten, now, window), field, 100.0) == 150.0
    before = pipelines._window(ten, now - timedelta(minutes=15), window)
    assert pipelines.slo_burning(before, field, 100.0) is None
    assert key not in names(now)

    Rollup.objects.filter(resolution_s=10).delete()
    rollups(pipeline, 10, [fine] * 60, now - timedelta(minutes=35))
    rollups(pipeline, 10, [slow] * 210, now)  # 35 minutes over: held since 15 minutes ago
    firing = {a.name: a for a in alerts.firing(now)}
    alert = firing[key[0]]
    assert alert.key == f"{kind.lower()}_slo_slow:{pipeline.pk}" and alert.severity == "ticket"
    assert "150 ms" in alert.summary and "SLO of 100 ms" in alert.summary
    assert f"Tandem{kind}SLOBurnFast" in firing  # the last hour and 5 minutes burn too
    alert_state.sync(now)
    assert AlertState.objects.filter(name=key[0], resolved_at=None).count() == 1

    # the latency recovers: the last 20 minutes under the SLO, the 30 min window no longer burns
    Rollup.objects.filter(resolution_s=10, start__gte=now - timedelta(minutes=20)).update(data=fine)
    alert_state.sync(now + timedelta(seconds=1))
    assert AlertState.objects.get(name=key[0]).resolved_at is not None


def _rows(pipeline, now):
    return (
        pipelines._buckets([pipeline.pk], 10, now - timedelta(hours=1))[pipeline.pk],
        pipelines._buckets([pipeline.pk], 300, now - timedelta(hours=7))[pipeline.pk],
    )


def test_a_slow_burn_needs_its_6h_window_too():
    pipeline = make_pipeline(slo_itl_p99_ms=100.0)
    now = timezone.now()
    rollups(pipeline, 300, [{"itl_p99_ms": 40.0}] * 75, now)  # the 6 h were fine
    rollups(pipeline, 10, [{"itl_p99_ms": 150.0}] * 270, now)  # the last 45 minutes were not
    assert ("TandemITLSLOBurnSlow", pipeline.pk) not in names(now)


def test_a_fast_burn_needs_the_last_hour_over_the_slo_as_well_as_the_last_5_minutes():
    pipeline = make_pipeline(slo_itl_p99_ms=100.0)
    now = timezone.now()
    rollups(pipeline, 10, [{"itl_p99_ms": 40.0}] * 300, now - timedelta(minutes=6))
    rollups(pipeline, 10, [{"itl_p99_ms": 150.0}] * 36, now)  # 6 minutes over in the hour
    assert names(now) == set()
    Rollup.objects.filter(resolution_s=10).delete()
    rollups(pipeline, 10, [{"itl_p99_ms": 150.0}] * 360, now)  # the whole hour over
    assert names(now) == {("TandemITLSLOBurnFast", pipeline.pk)}
