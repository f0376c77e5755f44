"""OpenAI-compatible /v1: auth, validation (OpenAI error objects), response and SSE shapes.

Streams here are written by a fake worker into the real test Redis before the view reads
them; the live-server tests with the official client are in test_openai_client.py."""

import json

import pytest

from inference.models import Generation, GenerationState
from tests.serving.conftest import CONTEXT, script

pytestmark = pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume")


def post(client, path, payload):
    return client.post(path, json.dumps(payload), content_type="application/json")


def assert_openai_error(response, status, *, code=None, param=None):
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if code is not None:
        assert error["code"] == code
    if param is not None:
        assert error["param"] == param
    return error


def sse_payloads(response) -> list:
    raw = b"".join(response).decode()
    assert raw.endswith("data: [DONE]\n\n")
    blocks = [b for b in raw.split("\n\n") if b and not b.startswith(":")]  # no comments
    assert all(b.startswith("data: ") for b in blocks)
    return [json.loads(b[6:]) for b in blocks[:-1]]


# --- auth -------------------------------------------------------------------------------------


def test_no_key_and_bad_keys_are_401(serving, api):
    assert_openai_error(api.get("/v1/models"), 401, code="missing_api_key")
    for key in ("tdm_deadbeef_nope", "sk-openai-style", "tdn_12345678_node"):
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        assert_openai_error(api.get("/v1/models"), 401, code="invalid_api_key")
        assert_openai_error(post(api, "/v1/completions", {"model": "demo", "prompt": "x"}), 401)


def test_revoked_key_is_401(serving, operator):
    from rest_framework.test import APIClient

    from fleet.accounts.services import api_key_create, api_key_revoke

    key, plain = api_key_create(user=operator, name="old")
    api_key_revoke(key=key)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert_openai_error(client.get("/v1/models"), 401, code="invalid_api_key")


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("persona", ["viewer", "outsider"])
def test_those_who_may_not_generate_get_403(serving, as_persona, path, persona):
    payload = {"model": "demo", "prompt": "x", "messages": [{"role": "user", "content": "x"}]}
    error = assert_openai_error(post(as_persona(persona), path, payload), 403)
    assert error["type"] == "permission_error"
    assert not Generation.objects.exists()


# --- models -------------------------------------------------------------------------------------


def test_models_lists_the_pipelines_one_may_use(serving, as_persona):
    from fleet.pipelines.models import Pipeline

    Pipeline.objects.create(name="sim", target_model="x", simulated=True)
    data = as_persona("operator").get("/v1/models").json()
    assert data["object"] == "list"
    assert [m["id"] for m in data["data"]] == ["demo"]
    assert set(data["data"][0]) == {"id", "object", "created", "owned_by"}
    assert as_persona("viewer").get("/v1/models").json()["data"] == []  # may not generate
    assert as_persona("operator").get("/v1/models/demo").json()["id"] == "demo"
    assert_openai_error(as_persona("operator").get("/v1/models/nope"), 404, code="model_not_found")
    assert_openai_error(as_persona("outsider").get("/v1/models"), 403)


def test_unknown_url_and_wrong_method_are_openai_errors(serving, as_persona):
    client = as_persona("operator")
    assert_openai_error(client.get("/v1/engines"), 404, code="unknown_url")
    assert_openai_error(client.get("/v1/completions"), 405)


# --- validation ---------------------------------------------------------------------------------

GOOD = {"model": "demo", "prompt": "def f(", "max_tokens": 4}


@pytest.mark.parametrize(
    ("overrides", "status", "param", "code"),
    [
        ({"model": "nope"}, 404, "model", "model_not_found"),
        ({"model": None}, 400, "model", None),
        ({"n": 0}, 400, "n", None),
        ({"n": 17}, 400, "n", None),
        ({"n": "2"}, 400, "n", None),
        ({"n": True}, 400, "n", None),
        ({"temperature": 2.1}, 400, "temperature", None),
        ({"temperature": -0.1}, 400, "temperature", None),
        ({"temperature": "1"}, 400, "temperature", None),
        ({"top_p": 0}, 400, "top_p", None),
        ({"top_p": 1.01}, 400, "top_p", None),
        ({"top_k": -2}, 400, "top_k", None),
        ({"seed": 1.5}, 400, "seed", None),
        ({"stop": ["a", "b", "c", "d", "e"]}, 400, "stop", None),
        ({"stop": [1]}, 400, "stop", None),
        ({"max_tokens": 0}, 400, "max_tokens", None),
        ({"max_tokens": CONTEXT}, 400, "max_tokens", "context_length_exceeded"),
        ({"prompt": "x" * CONTEXT}, 400, "prompt", "context_length_exceeded"),
        ({"prompt": ""}, 400, "prompt", None),
        ({"prompt": ["a", [1, 2]]}, 400, "prompt", None),
        ({"prompt": ["a", ""]}, 400, "prompt", None),
        ({"prompt": [[1, 2], []]}, 400, "prompt", None),
        ({"prompt": []}, 400, "prompt", None),
        ({"prompt": ["a"] * 65}, 400, "prompt", None),
        ({"prompt": ["a"] * 9, "best_of": 16}, 400, "best_of", None),
        ({"prompt": ["a"] * 9, "n": 16}, 400, "n", None),
        ({"prompt": [1, 99999]}, 400, "prompt", None),
        ({"prompt": {"text": "x"}}, 400, "prompt", None),
        ({"stream": "yes"}, 400, "stream", None),
        ({"stream_options": {"include_usage": True}}, 400, "stream_options", None),
        ({"logprobs": 21}, 400, "logprobs", None),
        ({"logprobs": -1}, 400, "logprobs", None),
        ({"logprobs": True}, 400, "logprobs", None),
        ({"top_logprobs": 2}, 400, "top_logprobs", None),
        ({"echo": "yes"}, 400, "echo", None),
        ({"max_tokens": 0, "echo": False}, 400, "max_tokens", None),
        ({"best_of": 17}, 400, "best_of", None),
        ({"best_of": 1, "n": 2}, 400, "best_of", None),
        ({"best_of": 3, "stream": True}, 400, "best_of", None),
        ({"suffix": "x"}, 400, "suffix", None),
        ({"logit_bias": {"1": 2}}, 400, "logit_bias", None),
    ],
)
def test_completions_validation(serving, as_persona, overrides, status, param, code):
    response = post(as_persona("operator"), "/v1/completions", GOOD | overrides)
    assert_openai_error(response, status, param=param, code=code)
    assert not Generation.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.[0].role"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages.[0].content"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages.[0].content",
        ),
        ({"messages": [{"role": "user", "content": "x" * CONTEXT}]}, "messages"),
        ({"max_completion_tokens": CONTEXT}, "max_completion_tokens"),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"logprobs": "yes"}, "logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"best_of": 2}, "best_of"),
        ({"echo": True}, "echo"),
        ({"n": 0}, "n"),
    ],
)
def test_chat_validation(serving, as_persona, overrides, param):
    payload = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]} | overrides
    assert_openai_error(
        post(as_persona("operator"), "/v1/chat/completions", payload), 400, param=param
    )


def test_bad_json_body(serving, as_persona, settings):
    client = as_persona("operator")
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    assert_openai_error(post(client, "/v1/completions", GOOD | {"prompt": "x" * 2000}), 413)
    response = client.post("/v1/completions", "{not json", content_type="application/json")
    assert_openai_error(response, 400)
    assert_openai_error(post(client, "/v1/completions", [1, 2]), 400)


def test_no_capacity_is_503(pipeline, as_persona):
    error = assert_openai_error(post(as_persona("operator"), "/v1/completions", GOOD), 503)
    assert error["code"] == "no_capacity" and error["type"] == "server_error"


# --- responses ----------------------------------------------------------------------------------


def test_completion_without_stream(serving, as_persona, fake_worker):
    response = post(as_persona("operator"), "/v1/completions", GOOD | {"temperature": 0})
    assert response.status_code == 200, response.content
    data = response.json()
    generation = fake_worker.submitted[0]
    assert data["id"] == f"cmpl-{generation.id.hex}"
    assert data["object"] == "text_completion" and data["model"] == "demo"
    assert data["choices"] == [
        {"index": 0, "text": "Hello, world!", "logprobs": None, "finish_reason": "stop"}
    ]
    assert data["usage"] == {"prompt_tokens": 6, "completion_tokens": 13, "total_tokens": 19}
    assert Generation.objects.get(pk=generation.id).params["temperature"] == 0.0


def test_completion_length_finish_and_token_prompt(serving, as_persona, fake_worker):
    fake_worker.events = script("abcd", finish_reason="length")
    payload = GOOD | {"prompt": [[100, 101, 102]]}
    data = post(as_persona("operator"), "/v1/completions", payload).json()
    assert data["choices"][0]["finish_reason"] == "length"
    assert fake_worker.submitted[0].prompt == "def" and data["usage"]["prompt_tokens"] == 3


def test_chat_without_stream_uses_the_transcript(serving, as_persona, fake_worker):
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}]
    payload = {"model": "demo", "messages": messages, "max_tokens": 20}
    data = post(as_persona("operator"), "/v1/chat/completions", payload).json()
    assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-")
    assert data["choices"][0]["message"] == {
        "role": "assistant",
        "content": "Hello, world!",
        "refusal": None,
    }
    assert data["choices"][0]["finish_reason"] == "stop"
    assert fake_worker.submitted[0].prompt == "system: Be terse.\nuser: hi\nassistant:"


def test_completion_stream_chunks(serving, as_persona, fake_worker):
    payload = GOOD | {"stream": True, "stream_options": {"include_usage": True}}
    response = post(as_persona("operator"), "/v1/completions", payload)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    chunks = sse_payloads(response)
    gid = fake_worker.submitted[0].id.hex
    assert {c["id"] for c in chunks} == {f"cmpl-{gid}"}
    assert {c["object"] for c in chunks} == {"text_completion"}
    texts = [c["choices"][0]["text"] for c in chunks[:-1]]
    assert "".join(texts) == "Hello, world!"
    # the text events already there when the stream reads come as fewer, longer chunks
    reasons = [c["choices"][0]["finish_reason"] for c in chunks[:-1]]
    assert reasons == [None] * (len(reasons) - 1) + ["stop"] and len(reasons) >= 2
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 6, "completion_tokens": 13, "total_tokens": 19}
    assert all(c["usage"] is None for c in chunks[:-1])


def test_chat_stream_chunks(serving, as_persona, fake_worker):
    payload = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    chunks = sse_payloads(post(as_persona("operator"), "/v1/chat/completions", payload))
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "Hello, world!"
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }
    assert all("usage" not in c for c in chunks)  # not asked for


def test_failed_generation(serving, as_persona, fake_worker):
    from inference import wire

    fake_worker.events = [wire.tokens_event([65], "A", 1), wire.error_event("verifier lost")]
    error = assert_openai_error(post(as_persona("operator"), "/v1/completions", GOOD), 502)
    assert "verifier lost" in error["message"] and error["code"] == "generation_failed"
    chunks = sse_payloads(post(as_persona("operator"), "/v1/completions", GOOD | {"stream": True}))
    assert chunks[0]["choices"][0]["text"] == "A"
    assert chunks[-1]["error"]["code"] == "generation_failed"


def test_a_silent_stream_times_out_and_cancels(serving, as_persona, fake_worker, monkeypatch):
    from inference.serving import openai_stream

    monkeypatch.setattr(openai_stream, "IDLE_TIMEOUT_S", 0.3)
    from inference import wire

    fake_worker.events = [wire.tokens_event([65], "A", 1)]  # then nothing
    error = assert_openai_error(post(as_persona("operator"), "/v1/completions", GOOD), 504)
    assert error["code"] == "timeout"
    generation = Generation.objects.get(pk=fake_worker.submitted[0].pk)
    assert generation.state == GenerationState.CANCELLED


def test_a_locked_database_or_redis_outage_is_503_retryable(serving, as_persona, monkeypatch):
    from django.db import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError

    from inference import services

    for exc in (OperationalError("database is locked"), RedisConnectionError("down")):

        def fail(exc=exc, **kwargs):
            raise exc

        monkeypatch.setattr(services, "generation_submit", fail)
        error = assert_openai_error(post(as_persona("operator"), "/v1/completions", GOOD), 503)
        assert error["code"] == "server_busy"
