"""The fleet-wide rules of compose/prometheus/alerts.yml, read from what /metrics would answer
now: the live snapshot's "meta" through /metrics' own `SnapshotCollector`, and `SloCollector`'s
supervised children. The same code makes the same figures under the same names, so each rule
reads the metric its PromQL reads:

- TandemTelemetryLag: `time() - tandem:aggregator_last_tick_timestamp_seconds > 30`, for 1m.
  The tick's age only grows until the next tick, so "over 30 s for a minute" is "over 90 s";
- TandemTelemetryDropped: the increase of `tandem:telemetry_samples_dropped_total` (each
  reason) over the last 5 min above 10 % of `tandem:telemetry_samples_total`'s, for 10m
  (pending in alert_state). The counters' history is what each evaluation saw (`record`: a
  Redis sorted set scored by the tick's time, HISTORY kept); a counter that went down (an
  aggregator restarted) was reset, as rate() has it;
- TandemMetricsDown: Tandem's own reading of "the scrape fails or answers no snapshot": Redis
  unreachable, or no aggregator tick in the live snapshot (`absent(...)`), for 2m (pending).
  The web process being down (`up{job="tandem"} == 0`) only Prometheus sees;
- TandemSupervisedChildGivenUp: `tandem:supervised_child_up{state="failed"} == 0`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import redis as redis_lib
from django.core.exceptions import ImproperlyConfigured

from fleet.runtime.supervision import FAILED
from fleet.telemetry.alerts.base import Alert
from fleet.telemetry.ingest import client
from fleet.telemetry.metrics import P, SnapshotCollector
from fleet.telemetry.metrics_slo import SloCollector
from fleet.telemetry.snapshot import LIVE_KEY

LAST_TICK = P + "aggregator_last_tick_timestamp_seconds"
SAMPLES = P + "telemetry_samples_total"
DROPPED = P + "telemetry_samples_dropped_total"
CHILD_UP = P + "supervised_child_up"

LAG_S, LAG_FOR_S = 30, 60  # alerts.yml: > 30, for: 1m
DROPPED_WINDOW = timedelta(minutes=5)  # rate(...[5m])
DROPPED_SHARE = 0.1
DROPPED_FOR_S = 600  # for: 10m
METRICS_DOWN_FOR_S = 120  # for: 2m
COUNTERS_KEY = "tandem:alerts:telemetry_counters"
HISTORY = timedelta(minutes=15)

_REDIS_ERRORS = (redis_lib.RedisError, ImproperlyConfigured)


@dataclass(frozen=True)
class Scrape:
    """The samples of the families the fleet-wide rules read, as a scrape would see them;
    `reachable` False (with `error`) when Redis did not answer."""

    reachable: bool
    error: str
    samples: dict[str, list[tuple[dict[str, str], float]]]

    def value(self, name: str) -> float | None:
        found = self.samples.get(name)
        return found[0][1] if found else None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        return {labels.get(label, ""): value for labels, value in self.samples.get(name, [])}


def scrape() -> Scrape:
    reachable, error, meta = True, "", None
    try:
        raw = client().hget(LIVE_KEY, "meta")
    except _REDIS_ERRORS as exc:
        reachable, error = False, (str(exc) or type(exc).__name__)[:120]
    else:
        try:
            meta = json.loads(raw) if raw is not None else None
        except ValueError:
            meta = None
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for collector in (SnapshotCollector({"meta": meta} if meta else {}), SloCollector()):
        for family in collector.collect():
            for s in family.samples:
                samples.setdefault(s.name, []).append((s.labels, s.value))
    return Scrape(reachable, error, samples)


def record(s: Scrape, now: datetime) -> None:
    """Keep this scrape's counters (at its tick's time) for the dropped rate."""
    ts = s.value(LAST_TICK)
    if not s.reachable or ts is None:
        return
    member = json.dumps([ts, s.value(SAMPLES) or 0.0, s.by_label(DROPPED, "reason")])
    try:
        pipe = client().pipeline(transaction=False)
        pipe.zadd(COUNTERS_KEY, {member: ts})
        pipe.zremrangebyscore(COUNTERS_KEY, "-inf", now.timestamp() - HISTORY.total_seconds())
        pipe.expire(COUNTERS_KEY, int(HISTORY.total_seconds()))
        pipe.execute()
    except _REDIS_ERRORS:
        pass  # the next evaluation records again


def counters(now: datetime, window: timedelta = DROPPED_WINDOW) -> list[tuple]:
    """[(tick ts, samples, {reason: dropped})...] recorded in the `window` before `now` (or
    after it: a tick is stamped by the aggregator's clock, not this process's)."""
    out = []
    members: list[bytes] = client().zrangebyscore(  # type: ignore[assignment]
        COUNTERS_KEY, now.timestamp() - window.total_seconds(), "+inf"
    )
    for member in members:
        try:
            ts, taken, dropped = json.loads(member)
        except (ValueError, TypeError):
            continue
        out.append((float(ts), float(taken), dict(dropped)))
    return sorted(out, key=lambda point: point[0])


def increase(values: list[float]) -> float:
    """A counter's increase over `values` (oldest first); a drop is a reset, as in rate()."""
    return sum(b - a if b >= a else b for a, b in zip(values, values[1:], strict=False))


def telemetry_lag(s: Scrape, now: datetime) -> list[Alert]:
    ts = s.value(LAST_TICK)
    if ts is None or now.timestamp() - ts <= LAG_S + LAG_FOR_S:
        return []
    when = datetime.fromtimestamp(ts, tz=UTC)
    return [
        Alert(
            key="telemetry_lag",
            name="TandemTelemetryLag",
            severity="page",
            summary=f"The aggregator's last tick was at {when:%Y-%m-%d %H:%M:%S} UTC, over "
            f"{LAG_S + LAG_FOR_S} s ago: live figures are stale",
        )
    ]


def telemetry_dropped(s: Scrape, now: datetime) -> list[Alert]:
    if not s.reachable:
        return []
    try:
        points = counters(now)
    except _REDIS_ERRORS:
        return []
    if len(points) < 2:
        return []
    taken = increase([p[1] for p in points])
    reasons = sorted(set().union(*(p[2] for p in points)))
    by_reason = {r: increase([p[2].get(r, 0.0) for p in points]) for r in reasons}
    dropped = sum(by_reason.values())
    if not dropped > DROPPED_SHARE * taken:
        return []
    why = ", ".join(f"{r} {n:.0f}" for r, n in sorted(by_reason.items()) if n)
    return [
        Alert(
            key="telemetry_dropped",
            name="TandemTelemetryDropped",
            severity="ticket",
            summary=f"{dropped:.0f} telemetry samples dropped in the last 5 min, over 10 % of "
            f"the {taken:.0f} taken ({why})",
            hold_s=DROPPED_FOR_S,
        )
    ]


def metrics_down(s: Scrape) -> list[Alert]:
    if s.reachable and s.value(LAST_TICK) is not None:
        return []
    why = (
        f"Redis unreachable ({s.error})"
        if not s.reachable
        else "no aggregator tick in Redis's live snapshot (is an aggregator running?)"
    )
    return [
        Alert(
            key="metrics_down",
            name="TandemMetricsDown",
            severity="page",
            summary=f"/metrics would answer without its live figures: {why}",
            hold_s=METRICS_DOWN_FOR_S,
        )
    ]


def children_given_up(s: Scrape) -> list[Alert]:
    return [
        Alert(
            key=f"child_given_up:{name}",
            name="TandemSupervisedChildGivenUp",
            severity="page",
            summary=f"manage.py up gave up restarting {name}",
        )
        for labels, value in s.samples.get(CHILD_UP, [])
        if labels.get("state") == FAILED and value == 0 and (name := labels.get("child"))
    ]


def fleetwide_alerts(s: Scrape, now: datetime) -> list[Alert]:
    return [
        *telemetry_lag(s, now),
        *telemetry_dropped(s, now),
        *metrics_down(s),
        *children_given_up(s),
    ]
