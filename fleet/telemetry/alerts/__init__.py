"""The 11 rules of compose/prometheus/alerts.yml, evaluated by Tandem itself from what it
already holds, so a one-machine install without Prometheus sees them too:

- nodes.py: TandemNodeLost, from the registry;
- pipelines.py: no goodput, acceptance collapse and the ITL / TTFT burns, from the rollups;
- fleetwide.py: telemetry lag, dropped samples, /metrics down and a child given up, from what
  /metrics itself would answer (its collectors over the live snapshot and supervisor file).

Each module's docstring says where Tandem's reading differs from the PromQL; `rules.RULES`
says it in a sentence per rule, on the /alerts page. `conditions()` finds what is true now;
`firing()` leaves out the conditions still pending a `for:` that only waiting can show (a
rule's `hold_s`; `alert_state.sync` keeps the pending ones and records firing and resolved).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from fleet.telemetry.alerts import fleetwide
from fleet.telemetry.alerts.base import Alert
from fleet.telemetry.alerts.nodes import nodes_lost
from fleet.telemetry.alerts.pipelines import (
    NO_GOODPUT_WINDOW,
    SLO_WINDOW,
    no_goodput,
    pipeline_alerts,
    slo_burning,
)
from fleet.telemetry.alerts.rules import RULES, Rule
from fleet.telemetry.models import AlertPending

__all__ = [
    "NO_GOODPUT_WINDOW",
    "RULES",
    "SLO_WINDOW",
    "Alert",
    "Rule",
    "conditions",
    "firing",
    "no_goodput",
    "served",
    "slo_burning",
]


def conditions(now: datetime | None = None, *, record: bool = False) -> list[Alert]:
    """Every rule's condition true at `now`, in a stable order; `record`: keep the counters
    this evaluation saw (the dropped rate's history; `alert_state.sync` does)."""
    now = now or timezone.now()
    scrape = fleetwide.scrape()
    if record:
        fleetwide.record(scrape, now)
    found = [*nodes_lost(now), *pipeline_alerts(now), *fleetwide.fleetwide_alerts(scrape, now)]
    return sorted(found, key=lambda a: a.key)


def served(found: list[Alert], now: datetime) -> list[Alert]:
    """`found` less the conditions still pending: a `hold_s` not yet served by their
    AlertPending row (or no row yet)."""
    held = [a.key for a in found if a.hold_s]
    since = (
        dict(AlertPending.objects.filter(key__in=held).values_list("key", "since")) if held else {}
    )
    return [
        a
        for a in found
        if not a.hold_s or (a.key in since and now - since[a.key] >= timedelta(seconds=a.hold_s))
    ]


def firing(now: datetime | None = None) -> list[Alert]:
    """Every condition firing at `now` (reads only)."""
    now = now or timezone.now()
    return served(conditions(now), now)
