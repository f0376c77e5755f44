"""Who a request acts as, and whether it may: the one place outside DRF that answers both.

`principal_for` is for views that authenticate themselves (SSE streams, the OpenAI /v1
endpoints, /metrics): a Bearer API key goes through the address lockout of `key_throttle`,
exactly as DRF's `ApiKeyAuthentication` does. `require` is for pages (session login).
Both decide with the one policy, `access.can`.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import JsonResponse

from fleet.accounts.access import can
from fleet.accounts.authentication import bearer_token, user_for_request_key
from fleet.accounts.key_throttle import KeyAuthLocked


class Refused(Exception):
    """A request with no principal. `status` is 401 (no or a wrong credential) or 429 (the
    address is locked out of key authentication for `retry_after` seconds); `code` says
    which: "missing_credentials", "invalid_api_key" or "locked_out"."""

    def __init__(self, status: int, detail: str, *, code: str, retry_after: int | None = None):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.code = code
        self.retry_after = retry_after

    def response(self) -> JsonResponse:
        """The refusal in the REST API's error shape (`{"detail": ...}`)."""
        response = JsonResponse({"detail": self.detail}, status=self.status)
        if self.retry_after is not None:
            response["Retry-After"] = str(self.retry_after)
        elif self.status == 401:
            response["WWW-Authenticate"] = "Bearer"
        return response


def principal_for(request, *, session: bool = True):
    """The user `request` acts as. A Bearer token, when sent, decides alone: an active
    `tdm_` key's owner, else `Refused` (401; 429 while the address is locked out — every key
    is refused then, the right one too). Without a token: the session's user when `session`
    (pass False where a session must not count, e.g. cross-site POSTs without CSRF)."""
    token = bearer_token(request)
    if token is not None:
        try:
            user = user_for_request_key(request, token) if token.startswith("tdm_") else None
        except KeyAuthLocked as exc:
            raise Refused(429, str(exc), code="locked_out", retry_after=exc.retry_after) from exc
        if user is None:
            raise Refused(401, "Invalid or revoked API key.", code="invalid_api_key")
        return user
    user = getattr(request, "user", None)
    if session and user is not None and user.is_authenticated:
        return user
    raise Refused(401, "Authentication credentials were not provided.", code="missing_credentials")


def require(request, action: str, obj=None) -> None:
    """Pages: raise PermissionDenied (403) unless the request's user may `action` (on `obj`).
    Pair it with `login_required`, which sends the anonymous to the login page first."""
    if not can(request.user, action, obj):
        raise PermissionDenied
