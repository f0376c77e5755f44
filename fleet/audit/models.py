"""The audit log's one model (`services.audit` writes it)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from fleet.audit.diff import changes as audit_changes


class AuditEvent(models.Model):
    """Who did what, when, before and after, and why. Planner actions have actor=None and
    actor_label="planner"."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_label = models.CharField(max_length=150)
    action = models.CharField(max_length=50)
    pipeline = models.ForeignKey(
        "pipelines.Pipeline",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit_events",
    )
    node = models.ForeignKey(
        "nodes.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events"
    )
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        db_table = "pipelines_auditevent"  # moved from the pipelines app: its table stays
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.actor_label} {self.action} at {self.created_at:%Y-%m-%d %H:%M:%S}"

    def changes(self):
        """What changed, field by field (`label: old → new`), for people to read."""
        return audit_changes(self.before or {}, self.after or {})
