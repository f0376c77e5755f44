"""Firing and resolved, with since when: `sync` records what `alerts.firing` finds as
AlertState rows (one open row per firing condition, closed when it stops), run by celery beat
every few seconds and by the alerts page when it opens (so a page is never staler than its load)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from fleet.telemetry.alerts import Alert, firing
from fleet.telemetry.models import AlertState

RESOLVED_SHOWN = timedelta(hours=24)  # how long a resolved alert stays on the list
RESOLVED_KEPT = timedelta(days=7)  # older resolved rows are deleted


def sync(now: datetime | None = None, found: list[Alert] | None = None) -> list[AlertState]:
    """Open a row for each newly firing condition, refresh the open ones' summaries, close the
    rows of conditions no longer firing; returns the open rows."""
    now = now or timezone.now()
    found = firing(now) if found is None else found
    by_key = {a.key: a for a in found}
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


def _open(alert: Alert, now: datetime) -> None:
    try:
        with transaction.atomic():  # a concurrent sync may open the same key first
            AlertState.objects.create(
                key=alert.key,
                name=alert.name,
                severity=alert.severity,
                summary=alert.summary[:300],
                pipeline_id=alert.pipeline_id,
                node_id=alert.node_id,
                first_seen=now,
            )
    except IntegrityError:
        pass


def listing(now: datetime | None = None) -> dict:
    """{"firing": open rows, newest first; "resolved": rows resolved in RESOLVED_SHOWN}."""
    now = now or timezone.now()
    return {
        "firing": list(AlertState.objects.filter(resolved_at=None).order_by("-first_seen")),
        "resolved": list(
            AlertState.objects.filter(resolved_at__gte=now - RESOLVED_SHOWN).order_by(
                "-resolved_at"
            )[:100]
        ),
    }


def firing_count() -> int:
    return AlertState.objects.filter(resolved_at=None).count()
