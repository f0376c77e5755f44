"""DRF authentication by API key: `Authorization: Bearer tdm_<prefix>_<secret>`."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import authentication, exceptions

from fleet.accounts.models import ApiKey
from fleet.accounts.secrets import digest, same, split_prefix


def bearer_token(request) -> str | None:
    header = authentication.get_authorization_header(request).decode(errors="replace")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def user_for_api_key(plain: str):
    """The user owning an active key, or None. Also used by the OpenAI endpoints."""
    prefix = split_prefix(plain, "tdm")
    if prefix is None:
        return None
    key = ApiKey.objects.select_related("user").filter(prefix=prefix).first()
    if key is None or key.revoked_at is not None or not same(digest(plain), key.key_hash):
        return None
    if not key.user.is_active:
        return None
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key.user


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        token = bearer_token(request)
        if token is None or not token.startswith("tdm_"):
            return None  # not ours: node tokens (tdn_) are handled by the nodes app
        user = user_for_api_key(token)
        if user is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        return (user, token)

    def authenticate_header(self, request) -> str:
        return self.keyword
