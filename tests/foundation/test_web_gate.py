"""Before the body is read: a body over the size limit is 413 and an API request with a body
but no credentials is 401, and neither body is read (Django's ASGI handler spools a whole
body to a temporary file before any view runs: an anonymous 300 MB body was written to disk
before its 401). Through the real ASGI handler, counting what it pulls off the socket."""

from __future__ import annotations

import asyncio
import json

import pytest

from fleet.runtime.web_handler import LaneASGIHandler

pytestmark = pytest.mark.django_db(transaction=True)
MB = 1024 * 1024


def _post(path: str, headers: list[tuple[bytes, bytes]], chunks: int, chunk: bytes, *, stall=0):
    """(status, body, bytes of the request body the app pulled) of one POST whose body is
    `chunks` x `chunk`, sent as ASGI messages on demand."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 1234),
        "server": ("testserver", 80),
    }
    pulled, sent = [0], []

    async def receive():
        if pulled[0] >= chunks * len(chunk):  # all sent: the client waits for its answer
            await asyncio.Event().wait()
        if stall and pulled[0] >= stall:  # a slow client: the rest never comes
            await asyncio.Event().wait()
        pulled[0] += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": pulled[0] < chunks * len(chunk)}

    async def send(message):
        sent.append(message)

    asyncio.run(LaneASGIHandler(lanes=1)(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]), pulled[0]


JSON = (b"content-type", b"application/json")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/v1/generations"])
def test_an_anonymous_api_body_is_never_read(path):
    status, body, pulled = _post(path, [JSON, (b"content-length", b"314572800")], 300, MB * b"x")
    assert (status, pulled) == (413, 0)  # 300 MB: over the limit, by its Content-Length
    status, body, pulled = _post(path, [JSON, (b"content-length", b"1000")], 1, 1000 * b"x")
    assert (status, pulled) == (401, 0)
    if path.startswith("/v1/"):
        assert json.loads(body)["error"]["code"] == "missing_api_key"
    else:
        assert "credentials" in json.loads(body)["detail"]


def test_a_chunked_body_stops_at_the_limit(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    headers = [JSON, (b"transfer-encoding", b"chunked"), (b"authorization", b"Bearer tdm_x")]
    status, body, pulled = _post("/v1/completions", headers, 1000, 1024 * b"x")
    assert status == 413 and pulled <= 4096 + 1024
    assert json.loads(body)["error"]["message"] == "The request body is too large."


def test_the_login_form_still_takes_an_anonymous_body():
    status, _body, pulled = _post(
        "/login/",
        [(b"content-type", b"application/x-www-form-urlencoded"), (b"content-length", b"7")],
        1,
        b"a=b&c=d",
    )
    assert pulled == 7 and status in (200, 403)  # read; CSRF answers, not the gate


def test_a_body_that_stops_coming_is_408(monkeypatch):
    from fleet.runtime import web_gate

    monkeypatch.setattr(web_gate.Bounded.__init__, "__kwdefaults__", {"timeout_s": 0.2})
    headers = [JSON, (b"content-length", b"2000"), (b"authorization", b"Bearer tdm_x")]
    status, body, pulled = _post("/v1/completions", headers, 2, 1000 * b"x", stall=1000)
    assert status == 408 and pulled == 1000
    assert json.loads(body)["error"]["code"] == "request_timeout"
