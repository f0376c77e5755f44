"""Issue 24.10: the OpenAI-compatible routes are in the OpenAPI schema (they are plain Django
views, added by `inference.serving.openai_schema`), every one of them, with a method the view
answers, and the schema stays valid OpenAPI."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, get_resolver
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema

from fleet.accounts.services import api_key_create
from inference.serving import openai_urls

pytestmark = pytest.mark.django_db


def _openapi_path(pattern) -> str:
    route = str(pattern.pattern)
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)


def _routes() -> set[str]:
    """Every OpenAI route the URLconf serves (the catch-all 404 left out), as OpenAPI paths."""
    routes = {
        "/v1" + _openapi_path(p)
        for p in openai_urls.urlpatterns
        if isinstance(p, URLPattern) and "(?P<path>" not in str(p.pattern)
    }
    root = {str(p.pattern) for p in get_resolver().url_patterns if isinstance(p, URLPattern)}
    routes |= {f"/{name}" for name in ("tokenize", "detokenize", "tokenizer_info") if name in root}
    return routes


def test_every_openai_route_is_in_the_schema_and_it_validates():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)  # raises on an invalid document
    routes = _routes()
    assert {"/v1/models", "/v1/chat/completions", "/tokenize"} <= routes  # the probe ran
    documented = {p for p in schema["paths"] if p.startswith("/v1/") or p in routes}
    assert documented == routes
    chat = schema["paths"]["/v1/chat/completions"]["post"]
    assert "text/event-stream" in chat["responses"]["200"]["content"]
    body = chat["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert schema["components"]["schemas"][body.rsplit("/", 1)[1]]["required"] == [
        "model",
        "messages",
    ]


def test_the_documented_methods_are_the_ones_the_views_answer(client, operator):
    """A method the schema does not list is refused by the view (OpenAI's 405), and the
    documented one is not; the documented bearer key is what the views take."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    _, key = api_key_create(user=operator, name="schema check")
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    for path, operations in schema["paths"].items():
        if not path.startswith("/v1/") and path not in _routes():
            continue
        url = path.replace("{model}", "no-such-model")
        (method,) = operations  # one method per route
        other = "post" if method == "get" else "get"
        assert getattr(client, other)(url).status_code == 405, (path, other)
        if method == "post":
            answered = client.post(url, "{}", content_type="application/json")
        else:
            answered = client.get(url)
        assert answered.status_code != 405, (path, method)
