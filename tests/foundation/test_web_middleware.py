"""fleet.runtime.web_middleware.CSPMiddleware writes the headers django-csp's own middleware writes,
and builds a plain response's policy once per setting."""

from typing import Any

import pytest
from csp.constants import HEADER, HEADER_REPORT_ONLY
from csp.exceptions import CSPNonceError
from csp.middleware import CSPMiddleware as StockCSP
from django.http import HttpResponse
from django.test import RequestFactory, override_settings

from fleet.runtime import web_middleware
from fleet.runtime.web_middleware import CSPMiddleware


def _headers(middleware_class, path="/api/v1/x", nonce=False, **attrs) -> dict:
    request: Any = RequestFactory().get(path)  # the middleware adds csp_nonce
    middleware = middleware_class(lambda r: HttpResponse("ok"))
    middleware.process_request(request)
    if nonce:
        str(request.csp_nonce)  # a template used it
        request._csp_nonce = "fixed-nonce"  # the same value for both middlewares
    response = HttpResponse("ok")
    for name, value in attrs.items():
        setattr(response, name, value)
    out = middleware.process_response(request, response)
    if not nonce:  # once the header is written, a nonce may not be asked for
        with pytest.raises(CSPNonceError):
            str(request.csp_nonce)
    return {h: out.get(h) for h in (HEADER, HEADER_REPORT_ONLY)}


CASES = [
    {},
    {"nonce": True},
    {"_csp_update": {"img-src": ["https://example.com"]}},
    {"_csp_replace": {"script-src": ["'self'", "https://cdn.example"]}},
    {"_csp_config": {"default-src": ["'none'"]}},
    {"_csp_exempt": True},
]


@pytest.mark.parametrize("case", CASES)
def test_headers_equal_the_stock_middlewares(case):
    for _ in range(2):  # the second time from the cache
        assert _headers(CSPMiddleware, **case) == _headers(StockCSP, **case)
    assert _headers(CSPMiddleware)[HEADER]


def test_a_changed_setting_is_not_served_from_the_cache():
    before = _headers(CSPMiddleware)
    policy = {"DIRECTIVES": {"default-src": ["'none'"]}}
    with override_settings(
        CONTENT_SECURITY_POLICY=policy, CONTENT_SECURITY_POLICY_REPORT_ONLY=policy
    ):
        ours = _headers(CSPMiddleware)
        assert ours == _headers(StockCSP)
        assert ours[HEADER_REPORT_ONLY] and ours[HEADER] != before[HEADER]
    with override_settings(
        CONTENT_SECURITY_POLICY={**policy, "EXCLUDE_URL_PREFIXES": ["/api/"]},
    ):
        assert _headers(CSPMiddleware) == _headers(StockCSP)
        assert _headers(CSPMiddleware)[HEADER] is None
    assert _headers(CSPMiddleware) == before


def test_a_plain_policy_is_built_once(monkeypatch):
    CSPMiddleware._built.clear()
    calls = []
    build = web_middleware.build_policy

    def counted(**kwargs):
        calls.append(kwargs)
        return build(**kwargs)

    monkeypatch.setattr(web_middleware, "build_policy", counted)
    for _ in range(3):
        _headers(CSPMiddleware)
    assert len(calls) == 2  # the policy and the report-only one, once each
