"""Bad input on the OpenAI-compatible /v1 endpoints is a 400 OpenAI error object (413 for a
body over the limit), never a 500, and nothing is stored: lone surrogates in every text
field, JSON nested too deep, integers past 64 bits, non-finite numbers."""

import json

import pytest

from inference.models import Generation

S = "\\ud800"  # inside JSON text: a valid escape that decodes to a lone surrogate
COMPLETION = '{"model": "demo", "prompt": "hi", "max_tokens": 2, %s}'
CHAT = '{"model": "demo", "messages": [{"role": "user", "content": "hi"}], %s}'

SURROGATES = [
    ("/v1/completions", f'{{"model": "{S}", "prompt": "hi"}}', "model"),
    ("/v1/completions", f'{{"model": "demo", "prompt": "{S}"}}', "prompt"),
    ("/v1/completions", f'{{"model": "demo", "prompt": ["a{S}"]}}', "prompt[0]"),
    ("/v1/completions", COMPLETION % f'"stop": "{S}"', "stop"),
    ("/v1/completions", COMPLETION % f'"stop": ["x", "{S}"]', "stop[1]"),
    ("/v1/completions", COMPLETION % f'"user": "{S}"', "user"),
    ("/v1/completions", COMPLETION % f'"suffix": "{S}"', "suffix"),
    ("/v1/completions", COMPLETION % f'"{S}": 1', None),
    ("/v1/chat/completions", f'{{"model": "{S}", "messages": []}}', "model"),
    (
        "/v1/chat/completions",
        f'{{"model": "demo", "messages": [{{"role": "user", "content": "{S}"}}]}}',
        "messages[0].content",
    ),
    (
        "/v1/chat/completions",
        f'{{"model": "demo", "messages": [{{"role": "{S}", "content": "x"}}]}}',
        "messages[0].role",
    ),
    (
        "/v1/chat/completions",
        '{"model": "demo", "messages": [{"role": "user", '
        f'"content": [{{"type": "text", "text": "{S}"}}]}}]}}',
        "messages[0].content[0].text",
    ),
    (
        "/v1/chat/completions",
        f'{{"model": "demo", "messages": [{{"role": "user", "name": "{S}", "content": "x"}}]}}',
        "messages[0].name",
    ),
    ("/v1/chat/completions", CHAT % f'"stop": "{S}"', "stop"),
    (
        "/v1/chat/completions",
        CHAT % f'"response_format": {{"type": "{S}"}}',
        "response_format.type",
    ),
]
HUGE = [2**63, -(2**63) - 1, 2**64, 10**300]
INTEGER_FIELDS = ["max_tokens", "seed", "top_k", "n", "max_completion_tokens", "logprobs"]


def send(client, path, raw):
    client.raise_request_exception = False
    return client.post(path, raw, content_type="application/json")


def assert_openai_400(response, status=400):
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/json"
    error = json.loads(response.content.decode("utf-8"))["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert "\ud800" not in json.dumps(error, ensure_ascii=False)
    return error


@pytest.fixture
def operator_client(serving, as_persona):
    yield as_persona("operator")
    assert not Generation.objects.exists()


@pytest.mark.parametrize(("path", "raw", "param"), SURROGATES)
def test_a_lone_surrogate_in_any_text_field_is_400(operator_client, path, raw, param):
    error = assert_openai_400(send(operator_client, path, raw))
    assert error["param"] == param


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_json_nested_too_deep_is_400(operator_client, path):
    for raw in ("[" * 100_000 + "]" * 100_000, COMPLETION % ('"x": ' + "[" * 40 + "]" * 40)):
        assert_openai_400(send(operator_client, path, raw))


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("field", INTEGER_FIELDS)
def test_integers_past_64_bits_are_400(operator_client, path, field):
    template = COMPLETION if path == "/v1/completions" else CHAT
    for huge in HUGE:
        assert_openai_400(send(operator_client, path, template % f'"{field}": {huge}'))


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_non_finite_and_oversized_numbers_are_400(operator_client, path):
    template = COMPLETION if path == "/v1/completions" else CHAT
    for value in ("NaN", "Infinity", "-Infinity", "1e999", "1" * 5000):
        assert_openai_400(send(operator_client, path, template % f'"temperature": {value}'))
    assert_openai_400(send(operator_client, path, '{"model": "demo", "prompt": [1e999]}'))


def test_huge_token_ids_in_a_prompt_are_400(operator_client):
    for huge in HUGE:
        raw = f'{{"model": "demo", "prompt": [1, {huge}], "max_tokens": 1}}'
        assert_openai_400(send(operator_client, "/v1/completions", raw))


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_bodies_over_the_limit_are_413(operator_client, settings, path):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    assert_openai_400(send(operator_client, path, COMPLETION % f'"x": "{"y" * 2000}"'), 413)


def test_nul_stays_allowed_in_prompts_but_not_in_the_model_name(serving, as_persona):
    client = as_persona("operator")
    error = assert_openai_400(send(client, "/v1/completions", '{"model": "de\\u0000mo"}'))
    assert error["param"] == "model"
    raw = '{"model": "demo", "prompt": "a\\u0000b", "max_tokens": 99999}'
    error = assert_openai_400(send(client, "/v1/completions", raw))  # got past the input rules
    assert error["param"] == "max_tokens"


def test_unknown_v1_paths_and_bad_methods_stay_openai_errors(serving, as_persona):
    client = as_persona("operator")
    assert_openai_400(client.get("/v1/nope/deeper"), 404)
    assert_openai_400(client.put("/v1/completions", "{}", content_type="application/json"), 405)
