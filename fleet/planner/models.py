"""What the planner has to check after it changed something: an Apply is measured for a
window afterwards and kept or rolled back (`fleet.planner.verification`)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class ApplyCheck(models.Model):
    class State(models.TextChoices):
        PENDING = "pending"
        HELD = "held"  # measured and kept
        ROLLED_BACK = "rolled_back"
        INCONCLUSIVE = "inconclusive"  # no traffic to measure within the window

    pipeline = models.ForeignKey(
        "pipelines.Pipeline", on_delete=models.CASCADE, related_name="apply_checks"
    )
    event = models.ForeignKey(
        "audit.AuditEvent", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    what = models.CharField(max_length=20)  # k_policy | split
    # what to put back: {"k_policy": {...}} or {"roles": [[node id, role], ...]}
    previous = models.JSONField(default=dict)
    predicted_goodput_tps = models.FloatField(null=True)
    baseline_goodput_tps = models.FloatField(null=True)  # measured before the change
    measured_goodput_tps = models.FloatField(null=True)
    applied_at = models.DateTimeField(default=timezone.now)
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    verdict = models.TextField(blank=True)
    checked_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["-applied_at", "-id"]
        indexes = [models.Index(fields=["state", "applied_at"])]

    def __str__(self) -> str:
        return f"{self.what} apply on pipeline {self.pipeline_id}: {self.state}"
