"""Django's error views (handler400/403/404/500) answering JSON on API paths.

A request that fails before DRF or the /v1 views see it (a body over the upload limit, an
unknown URL, an exception nothing caught) would otherwise get Django's HTML page. API clients
get the API's own shape: `{"detail": ...}` under /api/, OpenAI's error object under /v1/
and on vLLM's tokenizer paths (/tokenize, /detokenize, /tokenizer_info).
Pages keep Django's defaults."""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http import JsonResponse
from django.views import defaults

API_PREFIX, OPENAI_PREFIX = "/api/", "/v1/"
OPENAI_PATHS = frozenset({"/tokenize", "/detokenize", "/tokenizer_info"})


def _json(request, status: int, message: str, code: str) -> JsonResponse | None:
    path = request.path
    if path.startswith(OPENAI_PREFIX) or path in OPENAI_PATHS:
        kind = "server_error" if status >= 500 else "invalid_request_error"
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        return JsonResponse(body, status=status)
    if path.startswith(API_PREFIX):
        return JsonResponse({"detail": message}, status=status)
    return None


def bad_request(request, exception=None):
    if isinstance(exception, RequestDataTooBig | TooManyFieldsSent):
        response = _json(request, 413, "The request body is too large.", "request_too_large")
    else:
        response = _json(request, 400, "Bad request.", "bad_request")
    return response or defaults.bad_request(request, exception)


def permission_denied(request, exception=None):
    message = "You do not have permission to perform this action."
    response = _json(request, 403, message, "permission_denied")
    return response or defaults.permission_denied(request, exception)


def page_not_found(request, exception=None):
    response = _json(request, 404, "Not found.", "unknown_url")
    return response or defaults.page_not_found(request, exception)


def server_error(request):
    message = "The server had an error processing your request."
    return _json(request, 500, message, "server_error") or defaults.server_error(request)


def csrf_failure(request, reason=""):
    """CSRF_FAILURE_VIEW: a session-authenticated write without a valid CSRF token."""
    from django.views.csrf import csrf_failure as html_csrf_failure

    message = f"CSRF verification failed: {reason}" if reason else "CSRF verification failed."
    return _json(request, 403, message, "csrf_failed") or html_csrf_failure(request, reason)
