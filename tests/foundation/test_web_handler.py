"""fleet/runtime/web_handler.py and fleet/runtime/web_middleware.py: under ASGI a request's sync
work runs on a long-lived lane that keeps its database connection, and the middleware hooks cost no
thread hops (Django's own handler gave each request a new thread, hence a new connection,
and every hook of every middleware a hop)."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import SyncToAsync
from django.db.backends.base.base import BaseDatabaseWrapper

from fleet.accounts.services import api_key_create
from fleet.runtime.web_handler import LaneASGIHandler

pytestmark = pytest.mark.django_db(transaction=True)


async def _get(app, path: str, key: str) -> tuple[int, bytes]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"authorization", f"Bearer {key}".encode())],
        "client": ("127.0.0.1", 1234),
        "server": ("testserver", 80),
    }
    sent: list[dict] = []
    done = asyncio.Event()
    first = True

    async def receive():
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": b"", "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    done.set()
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_requests_share_a_lane_its_connection_and_hop_twice_at_most(operator, monkeypatch):
    key = api_key_create(user=operator, name="lanes")[1]
    app = LaneASGIHandler(lanes=1)
    connects, hops = [], []
    connect, call = BaseDatabaseWrapper.connect, SyncToAsync.__call__

    def counting_connect(self):
        connects.append(1)
        return connect(self)

    def counting_call(self, *args, **kwargs):
        hops.append(getattr(self.func, "__qualname__", repr(self.func)))
        return call(self, *args, **kwargs)

    monkeypatch.setattr(BaseDatabaseWrapper, "connect", counting_connect)
    monkeypatch.setattr(SyncToAsync, "__call__", counting_call)

    async def run():
        return [await _get(app, "/api/v1/generations", key) for _ in range(4)]

    answers = asyncio.run(run())
    assert all(status == 200 for status, _ in answers), answers
    assert json.loads(answers[-1][1])["count"] == 0
    assert len(connects) <= 1, connects  # one lane, one connection, kept
    assert len(hops) <= 2 * len(answers), hops  # the view, then response.close


def test_a_streams_checks_run_on_the_read_lane_not_behind_the_submits(operator, monkeypatch):
    """Under the lanes handler a stream's key/owner check runs on the read lane (SQLite WAL:
    a reader never waits for the writer, so it does not queue behind POSTs); a test client's
    request (no lanes handler) keeps its own thread."""
    import threading
    import uuid

    from fleet.runtime import web_handler
    from inference.serving import api_stream

    key = api_key_create(user=operator, name="reads")[1]
    threads: list[str] = []
    check = api_stream._stream_refusal

    def recording(request, generation_id):
        threads.append(threading.current_thread().name)
        return check(request, generation_id)

    monkeypatch.setattr(api_stream, "_stream_refusal", recording)
    assert web_handler.read_lane() is None  # not inside a request the handler serves
    status, _ = asyncio.run(
        _get(LaneASGIHandler(lanes=1), f"/api/v1/generations/{uuid.uuid4()}/stream", key)
    )
    assert status == 404
    assert threads and threads[0].startswith("read-lane"), threads
