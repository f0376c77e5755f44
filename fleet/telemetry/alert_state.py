"""Pending, firing and resolved, with since when: `sync` records what `alerts.conditions` finds
as AlertState rows (one open row per firing condition, closed when it stops), run by celery beat
every few seconds and by the alerts page when it opens (so a page is never staler than its load).

A condition whose rule holds it (`Alert.hold_s`: a `for:` only waiting can show) waits first as
an AlertPending row, and fires once that row is `hold_s` old; it goes when the condition stops.
Prometheus keeps the same "pending" state for the same reason."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from fleet.telemetry.alerts import RULES, Alert, conditions, served
from fleet.telemetry.models import AlertPending, AlertState

RESOLVED_SHOWN = timedelta(hours=24)  # how long a resolved alert stays on the list
RESOLVED_KEPT = timedelta(days=7)  # older resolved rows are deleted


def sync(now: datetime | None = None, found: list[Alert] | None = None) -> list[AlertState]:
    """Hold the conditions with a `for:` still to wait; open a row for each newly firing
    condition, refresh the open ones' summaries, close the rows of conditions no longer
    firing; returns the open rows."""
    now = now or timezone.now()
    found = conditions(now, record=True) if found is None else found
    _hold(found, now)
    by_key = {a.key: a for a in served(found, now)}
    open_rows = {r.key: r for r in AlertState.objects.filter(resolved_at=None)}
    gone = [k for k in open_rows if k not in by_key]
    if gone:
        AlertState.objects.filter(resolved_at=None, key__in=gone).update(resolved_at=now)
    for key, alert in by_key.items():
        row = open_rows.get(key)
        if row is None:
            _open(alert, now)
        elif row.summary != alert.summary:
            AlertState.objects.filter(pk=row.pk).update(summary=alert.summary[:300])
    AlertState.objects.filter(resolved_at__lt=now - RESOLVED_KEPT).delete()
    return list(AlertState.objects.filter(resolved_at=None).order_by("-first_seen"))


def _fields(alert: Alert) -> dict:
    return {
        "name": alert.name,
        "severity": alert.severity,
        "summary": alert.summary[:300],
        "pipeline_id": alert.pipeline_id,
        "node_id": alert.node_id,
    }


def _hold(found: list[Alert], now: datetime) -> None:
    """A pending row for each held condition (since its first sight); none for the others."""
    held = {a.key: a for a in found if a.hold_s}
    AlertPending.objects.exclude(key__in=held).delete()
    rows = {r.key: r for r in AlertPending.objects.filter(key__in=held)}
    for key, alert in held.items():
        row = rows.get(key)
        if row is None:
            try:
                with transaction.atomic():  # a concurrent sync may hold it first
                    AlertPending.objects.create(
                        key=key, since=now, hold_s=alert.hold_s, **_fields(alert)
                    )
            except IntegrityError:
                pass
        elif row.summary != alert.summary[:300] or row.hold_s != alert.hold_s:
            AlertPending.objects.filter(pk=row.pk).update(
                summary=alert.summary[:300], hold_s=alert.hold_s
            )


def _open(alert: Alert, now: datetime) -> None:
    try:
        with transaction.atomic():  # a concurrent sync may open the same key first
            AlertState.objects.create(key=alert.key, first_seen=now, **_fields(alert))
    except IntegrityError:
        pass


def pending(now: datetime | None = None) -> list[AlertPending]:
    """Held conditions not yet fired, oldest first."""
    now = now or timezone.now()
    return [row for row in AlertPending.objects.order_by("since") if row.fires_at > now]


def listing(now: datetime | None = None) -> dict:
    """{"firing": open rows, newest first; "pending": held conditions not yet fired;
    "resolved": rows resolved in RESOLVED_SHOWN; "rules": every rule with its state now}."""
    now = now or timezone.now()
    firing = list(AlertState.objects.filter(resolved_at=None).order_by("-first_seen"))
    waiting = pending(now)
    rules = [
        {
            "rule": rule,
            "firing": sum(1 for r in firing if r.name == rule.name),
            "pending": sum(1 for r in waiting if r.name == rule.name),
        }
        for rule in RULES
    ]
    return {
        "firing": firing,
        "pending": waiting,
        "resolved": list(
            AlertState.objects.filter(resolved_at__gte=now - RESOLVED_SHOWN).order_by(
                "-resolved_at"
            )[:100]
        ),
        "rules": rules,
    }


def firing_count() -> int:
    return AlertState.objects.filter(resolved_at=None).count()
