"""The front door of the two hot paths, `POST /v1/completions` and `POST /v1/chat/completions`,
under ASGI: served here, beside Django's handler rather than through it.

Through Django a generating request cost the web process more CPU than everything else it
did for that request: an `ASGIRequest` (its body spooled to a temporary file), the request
signals, nine middleware, URL resolution, the view's decorator, a `StreamingHttpResponse`
whose chunks Django's handler re-wrapped one by one. None of it decides anything for these
two paths. Here a request is: the size and credentials gate (`fleet.runtime.web_gate`, in the
handler, as for every request), the body read (bounded by the same gate), the body rules and
request rules of the Django views (`openai_jobs`: the same functions, so the two cannot
drift apart), ONE visit to the sync lane (key, pipeline, tokenization, the row), and the
answer: a JSON body, or the SSE body of `openai_stream.sse_body` (fed by the stream hub)
written straight to ASGI `send`, one message per verifier round.

The same answers as the Django views, header for header: OpenAI error objects with their
statuses (400, 401, 403, 404, 413, 429, 503, ...; a bad key is heard about before a bad
body), and the security headers the middleware would add. A request this door cannot answer
exactly as Django would -- a host not allowed, a plain-HTTP request that Django would
redirect to HTTPS, a blocked user agent, any method but POST -- goes to Django unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from functools import cache

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError
from django.http.request import split_domain_port, validate_host
from redis.exceptions import RedisError

from inference.serving import openai_jobs, openai_stream
from inference.serving.openai_api import Caller
from inference.serving.openai_errors import OpenAIError
from inference.serving.openai_format import from_request_error
from inference.serving.request_rules import RequestError

log = logging.getLogger(__name__)

PATHS = frozenset(openai_jobs.PLANS)


class _Request:
    """What `Caller.authorize` reads of a request (the key, the client's address)."""

    user = None

    def __init__(self, scope, headers: dict[bytes, bytes]):
        client = scope.get("client") or ("", 0)
        self.path = scope["path"]
        self.headers = {"authorization": headers.get(b"authorization", b"").decode("latin-1")}
        self.META = {"REMOTE_ADDR": client[0] or ""}


def serves(scope) -> bool:
    """Whether this door answers the request (else Django does)."""
    if scope.get("method") != "POST" or scope.get("path") not in PATHS:
        return False
    headers = dict(scope.get("headers") or ())
    host = headers.get(b"host", b"").decode("latin-1")
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return False  # Django answers it (400, DisallowedHost)
    if settings.SECURE_SSL_REDIRECT and not _secure(scope, headers):
        return False  # Django redirects it
    if settings.DISALLOWED_USER_AGENTS:
        return False  # CommonMiddleware's check
    return True


def _allowed_hosts() -> list[str]:
    hosts = settings.ALLOWED_HOSTS
    if settings.DEBUG and not hosts:  # as HttpRequest.get_host
        return [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def _secure(scope, headers: dict[bytes, bytes]) -> bool:
    proxy = settings.SECURE_PROXY_SSL_HEADER
    if proxy:
        name = proxy[0].removeprefix("HTTP_").replace("_", "-").lower().encode()
        value = headers.get(name)
        if value is not None:
            return value.decode("latin-1").split(",")[0].strip() == proxy[1]
    return scope.get("scheme") == "https"


@cache
def _security_headers(secure: bool) -> tuple[tuple[bytes, bytes], ...]:
    """The headers SecurityMiddleware, XFrameOptionsMiddleware and CSPMiddleware add to an
    API response (tests/serving/test_front_door.py compares them with Django's)."""
    from csp.utils import build_policy

    out: list[tuple[str, str]] = []
    if secure and settings.SECURE_HSTS_SECONDS:
        sts = f"max-age={settings.SECURE_HSTS_SECONDS}"
        sts += "; includeSubDomains" if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS else ""
        sts += "; preload" if settings.SECURE_HSTS_PRELOAD else ""
        out.append(("Strict-Transport-Security", sts))
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        out.append(("X-Content-Type-Options", "nosniff"))
    if settings.SECURE_REFERRER_POLICY:
        policy = settings.SECURE_REFERRER_POLICY
        parts = [v.strip() for v in policy.split(",")] if isinstance(policy, str) else policy
        out.append(("Referrer-Policy", ",".join(parts)))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        out.append(("Cross-Origin-Opener-Policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY))
    out.append(("X-Frame-Options", getattr(settings, "X_FRAME_OPTIONS", "DENY").upper()))
    for setting, header, report_only in (
        ("CONTENT_SECURITY_POLICY", "Content-Security-Policy", False),
        ("CONTENT_SECURITY_POLICY_REPORT_ONLY", "Content-Security-Policy-Report-Only", True),
    ):
        config = getattr(settings, setting, None)
        excluded = (config or {}).get("EXCLUDE_URL_PREFIXES") or ()
        if config is None or any("/v1/completions".startswith(p) for p in excluded):
            continue
        policy = build_policy(report_only=report_only)
        if policy:
            out.append((header, policy))
    return tuple((k.lower().encode(), v.encode()) for k, v in out)


async def _body(receive) -> bytes | None:
    """The whole body; None if the client left (or `fleet.runtime.web_gate.Bounded` cut it off: the
    handler answers 413/408 then)."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


class _Answer:
    """`send` for one request: the response's start with the security headers, the body."""

    def __init__(self, send, secure: bool):
        self.send, self.secure = send, secure

    async def start(self, status: int, content_type: bytes, extra=(), length: int | None = None):
        headers = [(b"content-type", content_type)]
        if length is not None:
            headers.append((b"content-length", str(length).encode()))
        headers.extend(extra)
        headers.extend(_security_headers(self.secure))
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    async def json(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        extra = [(k.lower().encode(), str(v).encode()) for k, v in (headers or {}).items()]
        await self.start(status, b"application/json", extra, len(data))
        await self.send({"type": "http.response.body", "body": data})

    async def error(self, exc: OpenAIError) -> None:
        await self.json(exc.status, exc.body(), exc.headers)


SSE_HEADERS = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


async def serve(scope, receive, send) -> None:
    """Answer one request that `serves` accepted. Runs inside the handler's lane context
    (`fleet.runtime.web_handler`): `sync_to_async` goes to the request's sync lane."""
    headers = dict(scope.get("headers") or ())
    answer = _Answer(send, _secure(scope, headers))
    raw = await _body(receive)
    if raw is None:
        return
    caller = Caller(_Request(scope, headers), "generate")  # type: ignore[arg-type]
    try:
        job = await _accept(caller, scope["path"], raw)
    except OpenAIError as exc:
        await answer.error(exc)
        return
    await _answer_until_gone(job, answer, receive)


async def _accept(caller: Caller, path: str, raw: bytes):
    """The Job of the request, or the OpenAIError to answer (as `openai_api.endpoint`)."""
    try:
        try:
            plan = openai_jobs.PLANS[path](openai_jobs.json_body(raw))
        except (OpenAIError, RequestError):
            await sync_to_async(caller.authorize)()  # the key's refusal comes first
            raise
        return await sync_to_async(openai_jobs.accept)(caller, plan)
    except OpenAIError:
        raise
    except RequestError as exc:
        raise from_request_error(exc) from exc
    except (DatabaseError, RedisError) as exc:  # transient: tell the client to retry
        log.warning("OpenAI endpoint %s: %r", path, exc)
        raise OpenAIError(
            503,
            "The server is busy; please retry the request.",
            type="server_error",
            code="server_busy",
        ) from exc
    except Exception as exc:
        log.exception("OpenAI endpoint %s failed", path)
        raise OpenAIError(
            500, "The server had an error processing your request.", type="server_error"
        ) from exc


async def _answer_until_gone(job, answer: _Answer, receive) -> None:
    """The answer, cut short (and the generations cancelled, by `openai_stream`'s own
    `finally`) if the client disconnects meanwhile: a task waits on `receive` for it."""
    me = asyncio.current_task()
    gone = answered = False

    async def watch():
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        if not answered and me is not None:  # (a server says "disconnect" once it is sent)
            gone = True
            me.cancel()

    watcher = asyncio.create_task(watch())
    try:
        if job.options.stream:
            await _stream(job, answer)
        else:
            try:
                body = await openai_stream.complete(job)
            except OpenAIError as exc:
                await answer.error(exc)
            else:
                await answer.json(200, body)
        answered = True
    except asyncio.CancelledError:
        if not gone:
            raise
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def _stream(job, answer: _Answer) -> None:
    body = openai_stream.sse_body(job)
    try:
        await answer.start(200, b"text/event-stream", SSE_HEADERS)
        async for piece in body:
            await answer.send({"type": "http.response.body", "body": piece, "more_body": True})
        await answer.send({"type": "http.response.body", "body": b""})
    finally:
        await body.aclose()  # cancels what still runs (openai_stream's finally)
