"""API keys for automation and OpenAI-compatible clients (Bearer tokens), stored hashed;
wall links, the signed grants that let an unattended screen show the monitoring wall."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from fleet.accounts.secrets import digest


class ApiKeyQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True)


class ApiKey(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def matches(self, plain: str) -> bool:
        return self.revoked_at is None and digest(plain) == self.key_hash


class WallLinkQuerySet(models.QuerySet):
    def usable(self, now=None):
        """Neither revoked nor expired."""
        now = now or timezone.now()
        return self.filter(revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )


class WallLink(models.Model):
    """A revocable grant to view the wall (page and websocket) and nothing else, until
    `expires_at` if set. The token is `django.core.signing` over the link's id; revoking
    sets `revoked_at`."""

    name = models.CharField(max_length=100, help_text="Where the screen is, e.g. 'NOC left'")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires")

    objects = WallLinkQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def active(self) -> bool:
        return self.revoked_at is None and not self.expired
