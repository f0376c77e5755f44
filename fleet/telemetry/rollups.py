"""Rollup storage: write the aggregator's buckets, prune by retention, read chart series."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from fleet.telemetry.accumulators import K_BATCH_FIELDS
from fleet.telemetry.merge import FLEET_REAL, FLEET_SIMULATED
from fleet.telemetry.models import RETENTION, Rollup

# Figures a chart may ask for (keys of fleet.telemetry.accumulators.derive()).
SERIES_FIELDS = (
    "k_mean",
    *K_BATCH_FIELDS,
    "acceptance_rate",
    "mean_acceptance_length",
    "per_position_acceptance",
    "alpha",
    "tokens_per_s",
    "batch_mean",
    "itl_p50_ms",
    "itl_p99_ms",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "power_w",
    "power_draft_w",
    "power_verify_w",
    "power_source",
    "tokens_per_j",
    "tokens_per_j_draft",
    "tokens_per_j_verify",
    "utilization",
    "queue_depth",
    "running",
    "waiting",
    "kv_usage",
)


def write(rows: list[dict]) -> int:
    objs = [Rollup(**row) for row in rows]
    Rollup.objects.bulk_create(objs, batch_size=500, ignore_conflicts=True)
    return len(objs)


def prune(now: datetime | None = None) -> int:
    now = now or timezone.now()
    deleted = 0
    for (scope, resolution), keep in RETENTION.items():
        deleted += Rollup.objects.filter(
            scope=scope, resolution_s=resolution, start__lt=now - keep
        ).delete()[0]
    return deleted


def series(
    scope: str,
    scope_id: int = 0,
    *,
    minutes: int = 30,
    resolution: int | None = None,
    since: datetime | None = None,
) -> dict:
    """Chart data for the last `minutes` (from `since` when given): {"t": [iso...], "<field>":
    [values...]}. Picks the 10 s resolution up to 6 hours, 5 min beyond."""
    if resolution is None:
        resolution = 10 if minutes <= 360 else 300
    if since is None:
        since = timezone.now() - timedelta(minutes=minutes)
    rows = Rollup.objects.filter(
        scope=scope, scope_id=scope_id, resolution_s=resolution, start__gte=since
    ).values_list("start", "data")
    out: dict[str, list] = {"t": []}
    for field in SERIES_FIELDS:
        out[field] = []
    for start, data in rows:
        # a point sits at the end of its bucket, where the live points continue
        out["t"].append((start + timedelta(seconds=resolution)).timestamp())
        for field in SERIES_FIELDS:
            out[field].append(data.get(field))
    return out


# The fleet's series as the wall draws it, real and simulated nodes apart (see
# `aggregation.FLEET_REAL` / `FLEET_SIMULATED`): the real nodes' figures under their own keys,
# the simulated ones' under "simulated_<key>", on one time axis.
SIMULATED_FIELDS = ("tokens_per_s", "power_w", "power_draft_w", "power_verify_w")


def fleet_series(*, minutes: int = 30, resolution: int | None = None) -> dict:
    """{"t": [...], "<field>": real nodes' values, "simulated_<field>": simulated nodes'} for
    SERIES_FIELDS / SIMULATED_FIELDS; a bucket where one class had no samples holds None."""
    # one window for both: read a moment apart, a bucket on the edge was in one series and
    # not the other, and the wall drew a gap (CI: test_live_figures saw None there)
    since = timezone.now() - timedelta(minutes=minutes)
    real = series("fleet", FLEET_REAL, minutes=minutes, resolution=resolution, since=since)
    sim = series("fleet", FLEET_SIMULATED, minutes=minutes, resolution=resolution, since=since)
    times = sorted(set(real["t"]) | set(sim["t"]))
    at_real = {t: i for i, t in enumerate(real["t"])}
    at_sim = {t: i for i, t in enumerate(sim["t"])}
    out: dict[str, list] = {"t": times}
    for field in SERIES_FIELDS:
        out[field] = [real[field][at_real[t]] if t in at_real else None for t in times]
    for field in SIMULATED_FIELDS:
        out[f"simulated_{field}"] = [sim[field][at_sim[t]] if t in at_sim else None for t in times]
    return out
