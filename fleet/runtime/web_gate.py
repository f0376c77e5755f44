"""What a request must pass before its body is read (Django's ASGI handler reads a whole body
into a temporary file, spilling to disk, before any view runs):

1. size: a body over DATA_UPLOAD_MAX_MEMORY_SIZE is refused with 413 -- at once when its
   Content-Length says so, else as soon as that many bytes have come (chunked); it is never
   read on, and never spooled past the limit;
2. credentials: on the API paths (`/api/`, `/v1/`) a request with a body and no credentials
   at all (no Authorization header, no session cookie) is refused with 401, its body unread.
   A key that is present is checked by the view as before (after the bounded body): that
   check is the one that counts failures toward the address's lockout.

A body that stops coming for BODY_READ_TIMEOUT_S is answered 408 (uvicorn bounds the idle
time between requests with `timeout_keep_alive`; it has no setting for slow headers).

Refusals are in the API's own format: an OpenAI error object on `/v1/`, `{"detail": ..}` on
`/api/`, text elsewhere. Paths that take anonymous bodies (the login form, `/ping`) keep
them, within the size limit.
"""

from __future__ import annotations

import asyncio
import json

from django.conf import settings

API_PREFIXES = ("/api/", "/v1/")
BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def _headers(scope) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope.get("headers", [])}


def _limit() -> int | None:
    return getattr(settings, "DATA_UPLOAD_MAX_MEMORY_SIZE", None)


def _refusal(path: str, status: int, message: str) -> tuple[bytes, bytes, list]:
    extra = [(b"www-authenticate", b"Bearer")] if status == 401 else []
    if path.startswith("/v1/"):
        kind = "invalid_request_error"
        code = {401: "missing_api_key", 408: "request_timeout"}.get(status, "request_too_large")
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        return json.dumps(body).encode(), b"application/json", extra
    if path.startswith("/api/"):
        return json.dumps({"detail": message}).encode(), b"application/json", extra
    return (message + "\n").encode(), b"text/plain; charset=utf-8", extra


async def respond(send, path: str, status: int, message: str) -> None:
    body, content_type, extra = _refusal(path, status, message)
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    headers.append((b"connection", b"close"))  # the unread body is not ours to skip
    await send({"type": "http.response.start", "status": status, "headers": headers + extra})
    await send({"type": "http.response.body", "body": body})


TOO_LARGE = "The request body is too large."
NO_CREDENTIALS = "Authentication credentials were not provided."
SLOW = "The request body did not arrive in time."


def early_refusal(scope) -> tuple[int, str] | None:
    """(status, message) to answer before reading the body, or None to go on."""
    if scope.get("method") not in BODY_METHODS:
        return None
    headers = _headers(scope)
    limit = _limit()
    length = headers.get(b"content-length")
    if limit is not None and length is not None:
        try:
            if int(length) > limit:
                return 413, TOO_LARGE
        except ValueError:
            return 400, "Bad Content-Length."
    has_body = (length is not None and length.strip() not in (b"", b"0")) or (
        b"chunked" in headers.get(b"transfer-encoding", b"").lower()
    )
    path = scope.get("path", "")
    if has_body and path.startswith(API_PREFIXES):
        cookie = headers.get(b"cookie", b"").decode("latin-1")
        session = f"{settings.SESSION_COOKIE_NAME}=" in cookie
        if not headers.get(b"authorization", b"").strip() and not session:
            return 401, NO_CREDENTIALS
    return None


BODY_READ_TIMEOUT_S = 30.0  # the longest wait for the next piece of a body


class Bounded:
    """`receive` that bounds a body: past the size limit, or BODY_READ_TIMEOUT_S without its
    next piece, the app sees a disconnect (Django gives up reading) and `over` / `slow` is
    set, so the caller answers 413 / 408. Once the body is complete it waits unbounded (an
    open stream listens for the client's disconnect on it)."""

    def __init__(self, receive, *, timeout_s: float = BODY_READ_TIMEOUT_S):
        self.receive, self.seen, self.over, self.slow = receive, 0, False, False
        self.limit, self.timeout_s, self.done = _limit(), timeout_s, False

    async def __call__(self):
        if self.done:
            return await self.receive()
        try:
            message = await asyncio.wait_for(self.receive(), self.timeout_s)
        except TimeoutError:
            self.slow = True
            return {"type": "http.disconnect"}
        if message.get("type") == "http.request":
            self.done = not message.get("more_body", False)
            self.seen += len(message.get("body", b""))
            if self.limit is not None and self.seen > self.limit:
                self.over = True
                return {"type": "http.disconnect"}
        return message


class Started:
    """`send` that remembers whether a response began."""

    def __init__(self, send):
        self.send, self.started = send, False

    async def __call__(self, message):
        if message.get("type") == "http.response.start":
            self.started = True
        await self.send(message)
