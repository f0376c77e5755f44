"""Bad input on every REST write operation is a 4xx in the API's JSON shape, never a 500:
lone surrogates and NUL in every body field, JSON nested too deep, bodies over the upload
limit, integers past 64 bits, non-finite numbers. Plus the list endpoints' page caps, JSON
error pages on API paths, and stored text that cannot be encoded."""

import json
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from fleet.accounts.services import api_key_create
from fleet.guard.rest import MAX_OFFSET, MAX_PAGE_SIZE
from inference.models import Generation
from inference.serving.openai_jobs import NUL_OK
from tests.hardening.rest import (
    api_schema,
    body_properties,
    concrete_path,
    headers_for,
    operations,
)

SCHEMA = api_schema()
WRITES = [(m, p) for m, p, op in operations(SCHEMA) if "requestBody" in op]
FIELDS = [
    (m, p, name)
    for m, p, op in operations(SCHEMA)
    if "requestBody" in op
    for name in body_properties(SCHEMA, op)
]
LISTS = [p for m, p, op in operations(SCHEMA, methods=("get",))
         if any(x["name"] == "limit" for x in op.get("parameters", []))]  # fmt: skip

# The OpenAI-compatible paths answer in OpenAI's error shape ({"error": {"message", "param"}}),
# and take NUL in their prompt fields by design (a byte-level model's text: stored as U+FFFD).
OPENAI_PATHS = ("/v1/", "/tokenize", "/detokenize")
NUL_FIELDS = [(m, p, f) for m, p, f in FIELDS if not (p.startswith(OPENAI_PATHS) and f in NUL_OK)]


def error_text(body: dict) -> str:
    return body["error"]["message"] if "error" in body else body["detail"]


def names_field(body: dict, field: str) -> bool:
    return field in body or body.get("error", {}).get("param") == field


DEEP = "[" * 100_000 + "]" * 100_000
SURROGATE = '"\\ud800"'  # JSON text: a valid escape that decodes to a lone surrogate


@pytest.fixture
def call(world, admin):
    _key, plain = api_key_create(user=admin, name="fuzz")
    client = Client(raise_request_exception=False)
    admin_headers = {"HTTP_AUTHORIZATION": f"Bearer {plain}"}

    def send(method: str, path: str, raw: str | bytes):
        return getattr(client, method)(
            concrete_path(path, world), raw, content_type="application/json",
            **headers_for(path, world, admin_headers),
        )  # fmt: skip

    return send


def assert_json_error(response, *statuses):
    assert response.status_code in statuses, (response.status_code, response.content[:300])
    assert response["Content-Type"] == "application/json"
    body = json.loads(response.content.decode("utf-8"))
    assert body and "\ud800" not in json.dumps(body, ensure_ascii=False)
    return body


def test_every_write_operation_is_covered():
    assert len(WRITES) >= 20 and len(FIELDS) >= 40 and len(LISTS) >= 8


@pytest.mark.parametrize(("method", "path"), WRITES)
def test_json_nested_too_deep_is_400(call, method, path):
    assert_json_error(call(method, path, DEEP), 400)


@pytest.mark.parametrize(("method", "path"), WRITES)
def test_non_finite_numbers_are_400(call, method, path):
    for raw in ('{"x": NaN}', '{"x": Infinity}', '{"x": 1e999}'):
        assert_json_error(call(method, path, raw), 400)


@pytest.mark.parametrize(("method", "path"), WRITES)
def test_bodies_over_the_upload_limit_are_413(call, settings, method, path):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = assert_json_error(call(method, path, json.dumps({"x": "y" * 2000})), 413)
    assert "too large" in error_text(body)


@pytest.mark.parametrize(("method", "path", "field"), FIELDS)
def test_a_lone_surrogate_in_any_field_is_400_and_not_echoed(call, method, path, field):
    body = assert_json_error(call(method, path, f'{{"{field}": {SURROGATE}}}'), 400)
    assert names_field(body, field), body


@pytest.mark.parametrize(("method", "path", "field"), NUL_FIELDS)
def test_nul_in_any_field_is_400(call, method, path, field):
    assert_json_error(call(method, path, json.dumps({field: "a\x00b"})), 400)


@pytest.mark.parametrize(("method", "path", "field"), FIELDS)
def test_integers_past_64_bits_in_any_field_are_400(call, method, path, field):
    for huge in (2**63, -(2**63) - 1, 10**300):
        assert_json_error(call(method, path, json.dumps({field: huge})), 400)


def test_a_surrogate_in_a_key_or_deep_inside_is_400(call):
    for raw in ('{"\\ud800": 1}', '{"stop": ["ok", "\\udfff"]}', '{"prompt": {"a": ["\\ud83d"]}}'):
        assert_json_error(call("post", "/api/v1/generations", raw), 400)


def test_a_surrogate_in_stop_is_not_stored(call):
    # Before: accepted and stored, and from then on every generations list was a 500.
    raw = '{"pipeline": "demo", "prompt": "hi", "max_tokens": 2, "stop": "\\ud800"}'
    body = assert_json_error(call("post", "/api/v1/generations", raw), 400)
    assert list(body) == ["stop"]
    assert Generation.objects.count() == 1  # the world's own


@pytest.mark.skipif(connection.vendor != "sqlite", reason="PostgreSQL refuses to store one")
def test_a_stored_lone_surrogate_does_not_break_the_generations_list(world, as_persona):
    Generation.objects.filter(pk=world["generation"].pk).update(params={"stop": ["\ud800"]})
    response = as_persona("admin").get("/api/v1/generations")
    assert response.status_code == 200
    assert json.loads(response.content)["results"][0]["params"] == {"stop": ["\ud800"]}


@pytest.mark.parametrize("path", LISTS)
def test_list_limits_are_capped_and_huge_offsets_refused(call, world, as_persona, path):
    client = Client(raise_request_exception=False)
    _key, plain = api_key_create(user=world["generation"].user, name="lists")
    auth: dict[str, Any] = {"HTTP_AUTHORIZATION": f"Bearer {plain}"}
    url = concrete_path(path, world)
    for limit in (2**64, 10**30, MAX_PAGE_SIZE + 1):
        response = client.get(url, {"limit": limit}, **auth)
        # The 2**64 limit was a 500; the cap itself is shown by the next test (a full table).
        assert response.status_code == 200, response.content[:300]
    for offset in (2**64, MAX_OFFSET + 1):
        body = assert_json_error(client.get(url, {"offset": offset}, **auth), 400)
        assert "offset" in body


def test_a_page_holds_at_most_the_maximum(world, as_persona):
    g = world["generation"]
    Generation.objects.bulk_create(
        Generation(pipeline=g.pipeline, user=g.user, prompt="p", prompt_tokens=[1], params={})
        for _ in range(MAX_PAGE_SIZE + 5)
    )
    data = as_persona("viewer").get("/api/v1/generations", {"limit": 10**6}).json()
    assert data["count"] == MAX_PAGE_SIZE + 6 and len(data["results"]) == MAX_PAGE_SIZE


def test_unknown_api_paths_are_json_404(as_persona):
    for path in ("/api/v1/nope", "/api/v2/generations", "/api/"):
        assert_json_error(as_persona("viewer").get(path), 404)


def test_an_unexpected_exception_is_a_json_500(world, as_persona, monkeypatch):
    import inference.serving.api

    def broken():
        raise RuntimeError("a bug")

    monkeypatch.setattr(inference.serving.api, "generations", broken)
    client = as_persona("viewer")
    client.raise_request_exception = False
    body = assert_json_error(client.get("/api/v1/generations"), 500)
    assert "a bug" not in body["detail"]


def test_pages_keep_their_html_errors(client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    response = client.get("/nowhere-at-all")
    assert response.status_code == 404 and "application/json" not in response["Content-Type"]
