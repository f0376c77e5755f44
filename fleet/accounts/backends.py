"""Login throttling for the login forms (`/login/`, `/admin/login/`): django-axes.

Axes counts failed logins per (username, client address) in the database, so every web
process sees the same count; after `TANDEM_LOGIN_FAILURE_LIMIT` failures the pair is locked
out for `TANDEM_LOGIN_COOLOFF_S` and the form answers 429, even to the right password.
"""

from __future__ import annotations

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.shortcuts import render


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes' lockout check for logins made over HTTP. A call without a request (a management
    command, the test client's `login()`) is no form login: nothing to count or refuse, so it
    passes on to the next backend instead of raising as axes does."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)


def lockout_response(request, original_response, credentials):
    """A locked-out login: 429 with `Retry-After` (the whole lock-out period: a failure while
    locked out does not extend it, but the first failure's time is not at hand here)."""
    seconds = int(settings.AXES_COOLOFF_TIME.total_seconds())
    response = render(
        request,
        "registration/locked_out.html",
        {"minutes": max(1, round(seconds / 60))},
        status=429,
    )
    response["Retry-After"] = str(seconds)
    return response
