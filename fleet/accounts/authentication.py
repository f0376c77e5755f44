"""DRF authentication by API key: `Authorization: Bearer tdm_<prefix>_<secret>`."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import authentication, exceptions

from fleet.accounts import key_throttle
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


def user_for_request_key(request, plain: str):
    """`user_for_api_key` behind the lockout of the request's address: a wrong key counts one
    failure, and raises `key_throttle.KeyAuthLocked` once the address is locked out. A valid
    key always works: keys are 256-bit random (a lockout cannot make guessing any harder), and
    refusing them would let anyone behind the same NAT or proxy lock every client out.
    Every API-key login over HTTP (REST, SSE, /v1) goes through here."""
    user = user_for_api_key(plain)
    if user is not None:
        return user
    address = key_throttle.client_address(request)
    key_throttle.check(address)
    key_throttle.record_failure(address)
    return None


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        token = bearer_token(request)
        if token is None or not token.startswith("tdm_"):
            return None  # not ours: node tokens (tdn_) are handled by the nodes app
        try:
            user = user_for_request_key(request, token)
        except key_throttle.KeyAuthLocked as exc:
            raise exceptions.Throttled(wait=exc.retry_after, detail=str(exc)) from exc
        if user is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        return (user, token)

    def authenticate_header(self, request) -> str:
        return self.keyword
