"""`null` means absent on every optional /v1 parameter: a client that sends its defaults as
null (`"max_completion_tokens": null`) gets what it would without them -- before, that null
hid `max_tokens` on chat (2,005 tokens for `max_tokens` 4)."""

import json

import pytest

from inference import services
from inference.serving import openai_api

COMPLETIONS_OPTIONAL = [
    "temperature", "top_p", "top_k", "seed", "stop", "n", "best_of", "logprobs", "echo",
    "stream", "stream_options", "user", "suffix", "presence_penalty", "frequency_penalty",
    "logit_bias", "response_format", "tools", "tool_choice", "functions", "function_call",
]  # fmt: skip
CHAT_OPTIONAL = [
    "max_completion_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n",
    "logprobs", "top_logprobs", "stream", "stream_options", "user", "presence_penalty",
    "frequency_penalty", "logit_bias", "response_format", "tools", "tool_choice", "functions",
    "function_call", "echo", "best_of",
]  # fmt: skip
CHAT = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
COMPLETION = {"model": "demo", "prompt": "hi", "max_tokens": 4}


@pytest.fixture
def submitted(serving, monkeypatch):
    """The params each request would have started a generation with (then: no capacity)."""
    seen: list[dict] = []

    def submit(*, params, **kwargs):
        seen.append(dict(params))
        raise services.NoCapacity("recorded, not run")

    monkeypatch.setattr(openai_api.services, "generation_submit", submit)
    return seen


def _post(client, path: str, body: dict):
    client.raise_request_exception = False
    return client.post(path, json.dumps(body), content_type="application/json")


@pytest.mark.parametrize(
    ("path", "base", "optional"),
    [
        ("/v1/completions", COMPLETION, COMPLETIONS_OPTIONAL),
        ("/v1/chat/completions", CHAT, CHAT_OPTIONAL),
    ],
)
def test_every_optional_parameter_sent_as_null_is_absent(
    as_persona, submitted, path, base, optional
):
    client = as_persona("operator")
    plain = _post(client, path, base)
    assert plain.status_code == 503, plain.content[:300]
    for name in optional:
        response = _post(client, path, base | {name: None})
        assert response.status_code == 503, (name, response.content[:300])
        assert submitted[-1] == submitted[0], name
    everything = _post(client, path, base | dict.fromkeys(optional))
    assert everything.status_code == 503, everything.content[:300]
    assert submitted[-1] == submitted[0] and submitted[0]["max_tokens"] == 4


def test_a_null_max_completion_tokens_does_not_hide_max_tokens(as_persona, submitted):
    response = _post(
        as_persona("operator"), "/v1/chat/completions", CHAT | {"max_completion_tokens": None}
    )
    assert response.status_code == 503, response.content[:300]
    assert submitted == [submitted[0]] and submitted[0]["max_tokens"] == 4


def test_null_include_usage_is_absent(as_persona, submitted):
    body = CHAT | {"stream": True, "stream_options": {"include_usage": None}}
    response = _post(as_persona("operator"), "/v1/chat/completions", body)
    assert response.status_code == 503, response.content[:300]


def test_a_required_parameter_left_null_is_refused_as_missing(as_persona, submitted):
    client = as_persona("operator")
    response = _post(client, "/v1/chat/completions", CHAT | {"messages": None})
    assert (
        response.status_code == 400 and json.loads(response.content)["error"]["param"] == "messages"
    )
    assert not submitted
