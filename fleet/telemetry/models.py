"""Telemetry history: rollups of the live figures at fixed resolutions, with retention.
Raw samples are never stored (the Redis stream is capped)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import models


class Scope(models.TextChoices):
    FLEET = "fleet", "fleet"
    PIPELINE = "pipeline", "pipeline"
    NODE = "node", "node"


# (scope, resolution seconds) -> how long rows are kept. Node rows are the many ones (one per
# node per bucket), so they are kept shorter.
RESOLUTIONS = (10, 300)
RETENTION: dict[tuple[str, int], timedelta] = {
    (Scope.FLEET, 10): timedelta(hours=24),
    (Scope.FLEET, 300): timedelta(days=30),
    (Scope.PIPELINE, 10): timedelta(hours=24),
    (Scope.PIPELINE, 300): timedelta(days=30),
    (Scope.NODE, 10): timedelta(hours=1),
    (Scope.NODE, 300): timedelta(days=7),
}


class Rollup(models.Model):
    """The derived figures (see `fleet.telemetry.accumulators.derive`) of one scope over one bucket
    [start, start + resolution_s). For the fleet, `scope_id` is 0 for all nodes, 1 for the real
    ones, 2 for the simulated ones (`aggregation.FLEET_*`)."""

    scope = models.CharField(max_length=10, choices=Scope.choices)
    scope_id = models.PositiveIntegerField(default=0)
    resolution_s = models.PositiveIntegerField()
    start = models.DateTimeField()
    data = models.JSONField(default=dict)

    class Meta:
        ordering = ["start"]
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "scope_id", "resolution_s", "start"], name="unique_rollup_bucket"
            )
        ]
        indexes = [models.Index(fields=["resolution_s", "start"], name="rollup_res_start")]

    def __str__(self) -> str:
        return f"{self.scope}:{self.scope_id} {self.resolution_s}s @ {self.start:%H:%M:%S}"


class AlertState(models.Model):
    """One firing of an alert condition (`fleet.telemetry.alerts`): open while `resolved_at` is
    empty. At most one open row per key; a condition that fires again opens a new row."""

    key = models.CharField(max_length=120)  # e.g. "node_lost:12", "itl_slo:3"
    name = models.CharField(max_length=40)  # the Prometheus rule it mirrors, e.g. TandemNodeLost
    severity = models.CharField(max_length=10)  # page / ticket, as in alerts.yml
    summary = models.CharField(max_length=300)
    pipeline_id = models.PositiveIntegerField(null=True, blank=True)  # for the link, if any
    node_id = models.PositiveIntegerField(null=True, blank=True)
    first_seen = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-first_seen"]
        constraints = [
            models.UniqueConstraint(
                fields=["key"], condition=models.Q(resolved_at=None), name="one_open_alert_per_key"
            )
        ]
        indexes = [models.Index(fields=["resolved_at"], name="alert_resolved_at")]

    def __str__(self) -> str:
        return f"{self.key} since {self.first_seen:%H:%M:%S}"


class AlertPending(models.Model):
    """A condition true since `since` whose rule's `for:` only waiting can show (the rule's
    `hold_s`, e.g. Redis unreachable for 2 min): it fires, as an AlertState row, once it has
    held `hold_s`; the row goes when the condition stops, fired or not."""

    key = models.CharField(max_length=120, unique=True)
    name = models.CharField(max_length=40)
    severity = models.CharField(max_length=10)
    summary = models.CharField(max_length=300)
    pipeline_id = models.PositiveIntegerField(null=True, blank=True)
    node_id = models.PositiveIntegerField(null=True, blank=True)
    since = models.DateTimeField()
    hold_s = models.PositiveIntegerField()

    class Meta:
        ordering = ["since"]

    def __str__(self) -> str:
        return f"{self.key} pending since {self.since:%H:%M:%S}"

    @property
    def fires_at(self) -> datetime:
        return self.since + timedelta(seconds=self.hold_s)
