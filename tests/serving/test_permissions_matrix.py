"""Who may do what on the serving APIs: the nodes matrix's table format, our own rows.

Same personas and exact status codes as tests/nodes/test_permissions_matrix.py; the node
agent's token (`tdn_`) authenticates a principal without a role on the DRF views (403)
and is no credential at all for the async views, stream and /v1 (401). The
OpenAI rows send a request that is invalid (n=0): a caller who passes authentication and
the role check gets the 400, which proves both run before the body is looked at.
"""

from __future__ import annotations

from functools import cached_property

import pytest
from django.conf import settings

from fleet.pipelines.models import Pipeline
from inference import services, wire
from inference.selectors import stream_owner
from tests.nodes.test_permissions_matrix import PERSONAS, Endpoint, World, gate
from tests.serving.conftest import place_pair, write_model_dir


class ServingWorld(World):
    @cached_property
    def pipeline(self):
        path = write_model_dir(settings.DATA_DIR / "models" / "matrix-byte")
        pipeline = Pipeline.objects.create(name="matrix", target_model=str(path))
        place_pair(pipeline, prefix="matrix")
        return pipeline

    @cached_property
    def generation(self):
        generation = services.generation_submit(
            pipeline=self.pipeline,
            prompt="ab",
            prompt_tokens=[97, 98],
            params={"max_tokens": 4},
            user=self.users["admin"],
        )
        wire.publish(generation.id, wire.done_event("stop", 2, 0), node=stream_owner(generation.id))
        return generation


def gen(suffix: str = ""):
    return lambda w: f"/api/v1/generations/{w.generation.id}{suffix}"


def v1(path: str):
    def url(w):
        w.pipeline  # noqa: B018  (exists before the request)
        return f"/v1/{path}"

    return url


NEW_GENERATION = {"pipeline": "matrix", "prompt": "def", "max_tokens": 4}
INVALID_COMPLETION = {"model": "matrix", "prompt": "x", "n": 0}
INVALID_CHAT = {"model": "matrix", "messages": [{"role": "user", "content": "x"}], "n": 0}

ENDPOINTS = [
    Endpoint("generations-list", "get", lambda w: "/api/v1/generations", gate("viewer", 200)),
    Endpoint(
        "generations-create",
        "post",
        lambda w: (w.pipeline, "/api/v1/generations")[1],
        gate("operator", 201),
        payload=lambda w: NEW_GENERATION,
    ),
    Endpoint("generations-retrieve", "get", gen(), gate("viewer", 200)),
    # The generation is the admin's: its text (the stream) and its cancel are the owner's
    # and admins' (by default the content role is admin).
    Endpoint("generations-stream", "get", gen("/stream"), gate("admin", 200, node=401)),
    Endpoint("generations-cancel", "delete", gen(), gate("admin", 202)),
    Endpoint("api-keys-list", "get", lambda w: "/api/v1/api-keys", gate("viewer", 200)),
    Endpoint(
        "api-keys-create",
        "post",
        lambda w: "/api/v1/api-keys",
        gate("viewer", 201),
        payload=lambda w: {"name": "matrix"},
    ),
    Endpoint("openai-models", "get", v1("models"), gate("viewer", 200, node=401)),
    Endpoint(
        "openai-completions",
        "post",
        v1("completions"),
        gate("operator", 400, node=401),
        payload=lambda w: INVALID_COMPLETION,
    ),
    Endpoint(
        "openai-chat",
        "post",
        v1("chat/completions"),
        gate("operator", 400, node=401),
        payload=lambda w: INVALID_CHAT,
    ),
]


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume")
@pytest.mark.parametrize(
    "endpoint,persona",
    [pytest.param(e, p, id=f"{e.name}-{p}") for e in ENDPOINTS for p in PERSONAS],
)
def test_serving_permissions_matrix(endpoint, persona, personas):
    world = ServingWorld(personas)
    url = endpoint.url(world)
    payload = endpoint.payload(world)
    client = world.client(persona)
    args, kwargs = ((), {}) if payload is None else ((payload,), {"format": "json"})
    response = getattr(client, endpoint.method)(url, *args, **kwargs)
    expected = endpoint.expect[persona]
    assert response.status_code == expected, (
        f"{endpoint.method.upper()} {url} as {persona}: expected {expected}, "
        f"got {response.status_code}: {getattr(response, 'content', b'')[:300]!r}"
    )
    if response.streaming:
        b"".join(response)  # drain (the stream ends at its done event)
