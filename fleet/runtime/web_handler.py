"""Django's ASGI handler with a fixed set of sync lanes, and WhiteNoise made async-capable.

Django's own handler runs each request in a fresh `ThreadSensitiveContext`: every request's
sync work (a DRF view, `sync_to_async` calls, the request signals) gets a NEW thread, which
opens a NEW database connection (SQLite: a connection plus its function registrations;
PostgreSQL: a TCP connection and authentication) and drops it at the end. Under load that
was most of the web process's CPU per request, and with SQLite the request threads fought
over the write lock with sleeps of tens of milliseconds (SQLite's busy handler).

Here every request runs its sync work on one of `settings.WEB_SYNC_LANES` long-lived
threads (round robin), each keeping its connection (`CONN_MAX_AGE`). Under load a lane is a
queue, and a request that visits it three times waits three times behind everyone else:
so the visits are few (no `request_started` hop; the middleware hooks inline, see
fleet/runtime/web_middleware.py; one hop per view). Async views (the SSE
streams, /v1) hold no lane while they wait; a lane is busy only while sync code runs. With
SQLite, one lane (the default) is also the cheapest lock discipline: writes of one process
queue in order instead of sleeping in the busy handler. Several web processes
(`TANDEM_WEB_WORKERS`) scale it out.

`AsyncWhiteNoiseMiddleware`: WhiteNoise 6 is sync-only, and ONE sync-only middleware makes
Django run the whole chain of every request through a thread hop and back (and the async
view under it then holds that thread until it returns). Serving a static file is a dict
lookup and an open(): done on the event loop, the rest of the chain stays async.
"""

from __future__ import annotations

import contextvars
import itertools
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core import signals
from django.core.handlers.asgi import ASGIHandler
from django.db import close_old_connections, reset_queries
from whitenoise.middleware import WhiteNoiseMiddleware

from fleet.runtime import web_gate


class Lane(ThreadPoolExecutor):
    """One long-lived thread. Before each job it does what Django's `request_started`
    receivers do for a request's thread (drop a broken or expired connection, reset the
    query log): here, on the thread that owns the connection, without a hop of its own."""

    def __init__(self, name: str):
        super().__init__(max_workers=1, thread_name_prefix=name)

    def submit(self, fn, /, *args, **kwargs):
        return super().submit(_fresh, fn, *args, **kwargs)


_read_lane: Lane | None = None
_served = contextvars.ContextVar("tandem_served_on_lanes", default=False)


def read_lane() -> Lane | None:
    """A lane for the short read-only checks of the hot path (a stream's key and owner), so
    they do not queue behind the submits of the request lanes: with SQLite (WAL) a reader
    never waits for a writer, and it keeps its own connection. None outside a request this
    handler serves (a test client: its sync work stays on its own thread and transaction).
    Call with `sync_to_async(fn, thread_sensitive=lane is None, executor=lane)`."""
    global _read_lane
    if not _served.get():
        return None
    if _read_lane is None:
        _read_lane = Lane("read-lane")
    return _read_lane


def _fresh(fn, *args, **kwargs):
    reset_queries()
    close_old_connections()
    return fn(*args, **kwargs)


class LaneASGIHandler(ASGIHandler):
    """`front`: a door that answers some requests itself, beside Django (`serves(scope)`,
    `serve(scope, receive, send)`: inference.serving.front_door), after the same gate and on
    the same lanes."""

    def __init__(self, lanes: int | None = None, front=None):
        super().__init__()
        self.front = front
        n = max(1, lanes or int(getattr(settings, "WEB_SYNC_LANES", 1)))
        self.lanes = [Lane(f"sync-lane-{i}") for i in range(n)]
        self._next = itertools.cycle(self.lanes)
        # Their work moves into Lane.submit: with no sync receiver left, `request_started`
        # costs no thread hop per request (request_finished's stay, after the response).
        signals.request_started.disconnect(reset_queries)
        signals.request_started.disconnect(close_old_connections)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        refusal = web_gate.early_refusal(scope)  # size and credentials before the body
        if refusal is not None:
            await web_gate.respond(send, scope.get("path", ""), *refusal)
            return
        bounded, started = web_gate.Bounded(receive), web_gate.Started(send)
        token = _served.set(True)
        try:
            async with ThreadSensitiveContext(executor=next(self._next)):
                if self.front is not None and self.front.serves(scope):
                    await self.front.serve(scope, bounded, started)
                else:
                    await self.handle(scope, bounded, started)
        finally:
            _served.reset(token)
        if (bounded.over or bounded.slow) and not started.started:
            status, why = (413, web_gate.TOO_LARGE) if bounded.over else (408, web_gate.SLOW)
            await web_gate.respond(send, scope.get("path", ""), status, why)


def get_asgi_application(front=None) -> LaneASGIHandler:
    """`django.core.asgi.get_asgi_application`, with the lanes (and a front door)."""
    import django

    django.setup(set_prefix=False)
    if isinstance(front, str):  # a module path: imported once Django is set up
        import importlib

        front = importlib.import_module(front)
    return LaneASGIHandler(front=front)


class AsyncWhiteNoiseMiddleware(WhiteNoiseMiddleware):
    sync_capable = True
    async_capable = True

    def __init__(self, get_response=None, *args, **kwargs):
        super().__init__(get_response, *args, **kwargs)
        self._async = iscoroutinefunction(get_response)
        if self._async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self._async:
            return self._acall(request)
        return super().__call__(request)

    async def _acall(self, request):
        if self.autorefresh:
            static_file = self.find_file(request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is not None:
            return self.serve(static_file, request)
        return await self.get_response(request)
