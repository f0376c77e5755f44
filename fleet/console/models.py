"""Console state: signed links that let an unattended screen show the monitoring wall."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class WallLink(models.Model):
    """A revocable grant to view the wall (page and websocket) and nothing else. The token is
    `django.core.signing` over the link's id; revoking sets `revoked_at`."""

    name = models.CharField(max_length=100, help_text="Where the screen is, e.g. 'NOC left'")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    @property
    def active(self) -> bool:
        return self.revoked_at is None
