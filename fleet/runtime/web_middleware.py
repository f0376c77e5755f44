"""Django's and django-csp's middleware, with their hooks run on the event loop under ASGI.

`MiddlewareMixin.__acall__` runs every `process_request` and `process_response` through
`sync_to_async` (and the handler adapts `process_view` the same way): with the nine
middleware of this project that is about eighteen thread hops per request -- each a future,
a context copy, a wake-up of the sync thread and a wake-up of the loop -- for hooks that only
read a cookie or set a header. It was the largest CPU cost of an API request.

Here the hooks that cannot block run inline; the ones that may touch the database or render a
page still go to the sync lane: a session that was read or changed is saved there, messages
that were used are stored there, a CSRF check of a write that is not exempt runs there (its
failure view renders a page). Under WSGI or a sync test client nothing changes.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import ClassVar

from asgiref.sync import sync_to_async
from csp.constants import HEADER as CSP_HEADER
from csp.constants import HEADER_REPORT_ONLY as CSP_HEADER_RO
from csp.middleware import CheckableLazyObject
from csp.middleware import CSPMiddleware as _CSP
from csp.utils import build_policy
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as _Auth
from django.contrib.messages.middleware import MessageMiddleware as _Messages
from django.contrib.sessions.middleware import SessionMiddleware as _Session
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.middleware.clickjacking import XFrameOptionsMiddleware as _XFrame
from django.middleware.common import CommonMiddleware as _Common
from django.middleware.csrf import CsrfViewMiddleware as _Csrf
from django.middleware.security import SecurityMiddleware as _Security

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class Inline:
    """Mixin for a `MiddlewareMixin`: hooks on the loop unless `*_needs_lane` says otherwise."""

    def request_needs_lane(self, request) -> bool:
        return False

    def response_needs_lane(self, request, response) -> bool:
        return False

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            if self.request_needs_lane(request):
                response = await sync_to_async(self.process_request)(request)
            else:
                response = self.process_request(request)
        response = response or await self.get_response(request)  # type: ignore[attr-defined]
        if hasattr(self, "process_response"):
            if self.response_needs_lane(request, response):
                response = await sync_to_async(self.process_response)(request, response)
            else:
                response = self.process_response(request, response)
        return response


class SecurityMiddleware(Inline, _Security):
    pass


class SessionMiddleware(Inline, _Session):
    def response_needs_lane(self, request, response) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (session.accessed or session.modified)


class CommonMiddleware(Inline, _Common):
    pass


class CsrfViewMiddleware(Inline, _Csrf):
    def __init__(self, get_response):
        super().__init__(get_response)
        if self.async_mode:  # the handler reads process_view after __init__
            check = super().process_view

            async def process_view(request, callback, callback_args, callback_kwargs):
                args = (request, callback, callback_args, callback_kwargs)
                if request.method in SAFE_METHODS or getattr(callback, "csrf_exempt", False):
                    return check(*args)  # nothing to verify: marks and returns
                return await sync_to_async(check)(*args)  # may render the failure page

            self.process_view = process_view  # type: ignore[method-assign,assignment]


class AuthenticationMiddleware(Inline, _Auth):
    pass  # request.user stays lazy: it is loaded where it is used


class MessageMiddleware(Inline, _Messages):
    def response_needs_lane(self, request, response) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (storage.used or storage.added_new)


class XFrameOptionsMiddleware(Inline, _XFrame):
    pass


class CSPMiddleware(Inline, _CSP):
    """django-csp 4.0's `process_response`, with the policy of a response that asks for nothing
    of its own (no nonce used, no `csp` decorator's config/update/replace) built once per
    setting: django-csp builds both headers again for every response (dataclass copies, a
    sort per directive): ~12 % of the event loop's CPU of an API request (cProfile). The headers are
    the stock middleware's (tests/foundation/test_web_middleware.py compares them)."""

    _built: ClassVar[dict[bool, str]] = {}

    def _policy(self, request, response, *, report_only: bool) -> str:
        parts = self.get_policy_parts(request=request, response=response, report_only=report_only)
        plain = parts.config is parts.update is parts.replace is parts.nonce is None
        if plain and report_only in self._built:
            return self._built[report_only]
        policy = build_policy(**asdict(parts), report_only=report_only)
        if plain:
            self._built[report_only] = policy
        return policy

    def process_response(self, request, response):
        if response.status_code in (500, 404) and settings.DEBUG:
            return response
        for report_only, header, exempt, setting in (
            (False, CSP_HEADER, "_csp_exempt", "CONTENT_SECURITY_POLICY"),
            (True, CSP_HEADER_RO, "_csp_exempt_ro", "CONTENT_SECURITY_POLICY_REPORT_ONLY"),
        ):
            csp = self._policy(request, response, report_only=report_only)
            if not csp:
                continue
            # Only set if not already set, not an excluded prefix and not exempted.
            prefixes = (getattr(settings, setting, None) or {}).get("EXCLUDE_URL_PREFIXES") or ()
            if (
                header not in response
                and getattr(response, exempt, False) is False
                and not request.path_info.startswith(tuple(prefixes))
            ):
                response[header] = csp
        # Once the header is written, reading request.csp_nonce is an error (django-csp's).
        if getattr(request, "_csp_nonce", None) is None:
            request.csp_nonce = CheckableLazyObject(self._csp_nonce_post_response)
        return response


@receiver(setting_changed)
def _csp_setting_changed(*, setting, **kwargs) -> None:
    if setting.startswith("CONTENT_SECURITY_POLICY"):
        CSPMiddleware._built.clear()
