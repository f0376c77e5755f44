"""The front door of POST /v1/completions and /v1/chat/completions (inference/serving/
front_door.py): the ASGI application itself, called here with ASGI messages (no server), on
this process's test database (committed: the sync lanes have their own connections) and
Redis. It must answer as the Django views do (test_openai_api.py, through Django's test
client) without going through Django's handler, and hand what it cannot answer exactly
(other methods, a bad host) to Django."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.core import signals
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.accounts.services import api_key_create
from inference.models import Generation, GenerationState
from tests.serving.conftest import script

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)

SECURITY = [
    "x-content-type-options",
    "referrer-policy",
    "cross-origin-opener-policy",
    "x-frame-options",
    "content-security-policy",
]
COMPLETION = {"model": "demo", "prompt": "Hi", "max_tokens": 5, "temperature": 0}


@pytest.fixture
def key(operator):
    return api_key_create(user=operator, name="front-door")[1]


@pytest.fixture
def django_requests():
    """How many requests went through Django's handler (it sends `request_started`)."""
    seen: list[int] = []

    def count(**kwargs):
        seen.append(1)

    signals.request_started.connect(count)
    yield seen
    signals.request_started.disconnect(count)


def call(method, path, body, *, key=None, host=b"testserver", leave_after=None):
    """(status, headers, body) of one request to the ASGI application; `leave_after`: the
    client hangs up once that many body messages came."""
    from fleet.asgi import application

    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = [(b"host", host), (b"content-type", b"application/json")]
    headers.append((b"content-length", str(len(raw)).encode()))
    if key:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5555),
        "server": ("testserver", 80),
    }
    out: dict = {"status": None, "headers": {}, "body": []}

    async def run():
        gone = asyncio.Event()
        sent = iter([{"type": "http.request", "body": raw, "more_body": False}])

        async def receive():
            message = next(sent, None)
            if message is not None:
                return message
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                out["status"] = message["status"]
                out["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}
            else:
                out["body"].append(message.get("body", b""))
                if leave_after is not None and len(out["body"]) >= leave_after:
                    gone.set()
                if not message.get("more_body", False):
                    gone.set()

        await asyncio.wait_for(application(scope, receive, send), 20)

    asyncio.run(run())
    return out["status"], out["headers"], b"".join(out["body"])


def test_a_completion_is_served_beside_django(serving, key, fake_worker, django_requests):
    status, headers, body = call("POST", "/v1/completions", COMPLETION, key=key)
    assert status == 200, body
    assert headers["content-type"] == "application/json"
    answer = json.loads(body)
    assert answer["object"] == "text_completion"
    assert answer["choices"][0]["text"] == "Hello, world!"
    assert answer["usage"]["completion_tokens"] == len("Hello, world!")
    assert not django_requests  # no Django handler, middleware or view on this path
    generation = Generation.objects.get()
    assert answer["id"] == f"cmpl-{generation.id.hex}"


def test_a_chat_stream_is_written_by_the_door(serving, key, fake_worker, django_requests):
    body = {"model": "demo", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    status, headers, raw = call("POST", "/v1/chat/completions", body, key=key)
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    assert headers["cache-control"] == "no-cache"
    text = raw.decode()
    assert text.endswith("data: [DONE]\n\n")
    chunks = [json.loads(b[6:]) for b in text.split("\n\n") if b.startswith("data: {")]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert content == "Hello, world!"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert not django_requests


def test_headers_and_errors_are_djangos(serving, key, operator, django_requests):
    """The same refusals, with the same security headers, as through Django's handler."""
    from tests.conftest import client_for

    django_client = client_for(operator)
    cases = [
        ("tdm_deadbeef_nope", COMPLETION, 401, "invalid_api_key"),
        ("tdm_deadbeef_nope", b"{not json", 401, "invalid_api_key"),  # the key comes first
        (key, b"{not json", 400, None),
        (key, [1, 2], 400, None),
        (key, COMPLETION | {"model": "nope"}, 404, "model_not_found"),
        (key, COMPLETION | {"temperature": 9}, 400, "invalid_value"),
        (key, COMPLETION | {"n": 99}, 400, None),
    ]
    for plain, body, status, code in cases:
        got, headers, raw = call("POST", "/v1/completions", body, key=plain)
        assert got == status, raw
        error = json.loads(raw)["error"]
        assert code is None or error["code"] == code
        django_client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
        data = body if isinstance(body, bytes) else json.dumps(body)
        reference = django_client.post("/v1/completions", data, content_type="application/json")
        assert reference.status_code == status
        assert reference.json() == json.loads(raw)
        for name in SECURITY:
            assert headers[name] == reference.headers[name], name
    assert len(django_requests) == len(cases)  # the references only


def test_no_capacity_is_503_with_retry_after(pipeline, key):
    status, headers, raw = call("POST", "/v1/completions", COMPLETION, key=key)
    assert status == 503
    assert int(headers["retry-after"]) > 0
    assert json.loads(raw)["error"]["code"] == "no_capacity"


def test_other_methods_and_bad_hosts_go_to_django(serving, key, django_requests):
    status, _, raw = call("PUT", "/v1/completions", COMPLETION, key=key)
    assert status == 405 and json.loads(raw)["error"]["message"]
    status, _, _ = call("POST", "/v1/completions", COMPLETION, key=key, host=b"evil.example")
    assert status == 400
    assert len(django_requests) == 2
    assert not Generation.objects.exists()


def test_a_client_that_leaves_cancels_its_generation(serving, key, fake_worker):
    fake_worker.delay_s = 0.05
    fake_worker.events = script("a long answer that the client will not wait for", chunk=1)
    body = COMPLETION | {"stream": True, "max_tokens": 60}
    status, _, raw = call("POST", "/v1/completions", body, key=key, leave_after=3)
    assert status == 200 and not raw.endswith(b"[DONE]\n\n")
    assert Generation.objects.get().state == GenerationState.CANCELLED


def test_one_generation_is_one_statement(serving, monkeypatch):
    """No transaction of its own: one INSERT in autocommit, the start message sent at once."""
    from inference import services, wire

    sent: list = []
    monkeypatch.setattr(wire, "send", lambda node, kind, payload: sent.append((kind, payload)))
    in_transaction: list[bool] = []

    def watch(execute, sql, params, many, context):
        in_transaction.append(connection.in_atomic_block)
        return execute(sql, params, many, context)

    with CaptureQueriesContext(connection) as queries, connection.execute_wrapper(watch):
        generation = services.generation_submit(
            pipeline=serving, prompt="hi", prompt_tokens=[104, 105], params={}, user=None
        )
    writes = [q["sql"] for q in queries if not q["sql"].lstrip().upper().startswith("SELECT")]
    assert len(writes) == 1 and writes[0].startswith("INSERT INTO"), writes
    assert not any(in_transaction)  # autocommit: no BEGIN ... COMMIT around it
    assert sent == [("start", services.start_payload(generation))]
    stored = Generation.objects.get()
    assert (stored.prompt, stored.prompt_tokens, stored.state) == ("hi", [104, 105], "queued")
    assert stored.verifier_id == generation.verifier_id
