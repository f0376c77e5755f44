"""Who may do what on the pipeline and planner endpoints and pages: one table, exact codes
(the same shape as tests/nodes/test_permissions_matrix.py, reusing its helpers)."""

from __future__ import annotations

from functools import cached_property

import pytest

from tests.factories import make_pipeline, online_node, place
from tests.nodes.test_permissions_matrix import PERSONAS, Endpoint, World, gate


class PipelineWorld(World):
    @cached_property
    def pipeline(self):
        p = make_pipeline(name="matrix-pipeline")
        place(p, online_node(name="matrix-v1"), "verify")
        place(p, online_node(name="matrix-v2"), "verify")
        place(
            p, online_node(name="matrix-d1", profile="d-matrix-corsair", roles=("draft",)), "draft"
        )
        return p

    @cached_property
    def other(self):
        return make_pipeline(name="matrix-other")

    @cached_property
    def free(self):
        return online_node(name="matrix-free")

    def placed(self, name="matrix-v2"):
        return self.pipeline.placements.get(node__name=name).node


def api(path: str):
    return lambda w: "/api/v1/" + path.format(w=w)


def page(path: str):
    return lambda w: path.format(w=w)


ENDPOINTS = [
    Endpoint("pipelines-list", "get", api("pipelines"), gate("viewer", 200)),
    Endpoint("pipelines-retrieve", "get", api("pipelines/{w.pipeline.pk}"), gate("viewer", 200)),
    Endpoint(
        "pipelines-revisions",
        "get",
        api("pipelines/{w.pipeline.pk}/revisions"),
        gate("viewer", 200),
    ),
    Endpoint("pipelines-audit", "get", api("pipelines/{w.pipeline.pk}/audit"), gate("viewer", 200)),
    Endpoint(
        "pipelines-create",
        "post",
        api("pipelines"),
        gate("operator", 201),
        payload=lambda w: {"name": "matrix-new", "target_model": "t-8b", "draft_model": "d-1b"},
    ),
    Endpoint(
        "pipelines-patch",
        "patch",
        api("pipelines/{w.pipeline.pk}"),
        gate("operator", 200),
        payload=lambda w: {"max_verify_batch": 8},
    ),
    Endpoint(
        "pipelines-place",
        "post",
        api("pipelines/{w.pipeline.pk}/place"),
        gate("operator", 200),
        payload=lambda w: {"node": w.free.pk, "role": "verify"},
    ),
    Endpoint(
        "pipelines-k-policy",
        "post",
        api("pipelines/{w.pipeline.pk}/k-policy"),
        gate("operator", 200),
        payload=lambda w: {"k_policy": {"mode": "fixed", "k": 2}},
    ),
    Endpoint(
        "pipelines-batch-caps",
        "post",
        api("pipelines/{w.pipeline.pk}/batch-caps"),
        gate("operator", 200),
        payload=lambda w: {"max_verify_batch": 4},
    ),
    Endpoint(
        "pipelines-swap-draft",
        "post",
        api("pipelines/{w.pipeline.pk}/swap-draft"),
        gate("operator", 200),
        payload=lambda w: {"drafter_kind": "ngram"},
    ),
    Endpoint(
        "pipelines-rollback",
        "post",
        api("pipelines/{w.pipeline.pk}/rollback"),
        gate("operator", 400),
        payload=lambda w: {"to_version": 1},  # version 1 is the current one: a field error
    ),
    Endpoint(
        "pipelines-move",
        "post",
        lambda w: f"/api/v1/pipelines/{w.pipeline.pk}/nodes/{w.placed().pk}/move",
        gate("operator", 200),
        payload=lambda w: {"to_pipeline": w.other.pk},
    ),
    Endpoint(
        "pipelines-drain",
        "post",
        lambda w: f"/api/v1/pipelines/{w.pipeline.pk}/nodes/{w.placed().pk}/drain",
        gate("operator", 200),
        payload=lambda w: {},
    ),
    Endpoint(
        "pipelines-unplace",
        "post",
        lambda w: f"/api/v1/pipelines/{w.pipeline.pk}/nodes/{w.placed().pk}/unplace",
        gate("operator", 200),
        payload=lambda w: {},
    ),
    # planner
    Endpoint(
        "planner-recommendation",
        "get",
        api("planner/pipelines/{w.pipeline.pk}/recommendation"),
        gate("viewer", 200),
    ),
    Endpoint(
        "planner-preview",
        "post",
        api("planner/pipelines/{w.pipeline.pk}/preview"),
        gate("viewer", 200),
        payload=lambda w: {"action": "set_k_policy", "k_policy": {"mode": "fixed", "k": 1}},
    ),
    Endpoint(
        "planner-apply",
        "post",
        api("planner/pipelines/{w.pipeline.pk}/apply"),
        gate("operator", 200),
        payload=lambda w: {"what": "k_policy"},
    ),
    Endpoint(
        "planner-what-if",
        "post",
        api("planner/what-if"),
        gate("viewer", 200),
        payload=lambda w: {"move_to_verify": 1},
    ),
    # pages
    Endpoint(
        "page-pipelines", "get", page("/pipelines/"), gate("viewer", 200, page=True), session=True
    ),
    Endpoint(
        "page-pipeline-new",
        "get",
        page("/pipelines/new"),
        gate("operator", 200, page=True),
        session=True,
    ),
    Endpoint(
        "page-pipeline-act",
        "post",
        page("/pipelines/{w.pipeline.pk}/act/k_policy"),
        gate("operator", 302, page=True),
        payload=lambda w: {"mode": "fixed", "k": "3"},
        session=True,
    ),
    Endpoint(
        "page-planner", "get", page("/planner/"), gate("viewer", 200, page=True), session=True
    ),
    Endpoint(
        "page-what-if",
        "get",
        page("/planner/what-if?run=1&move_to_verify=1"),
        gate("viewer", 200, page=True),
        session=True,
    ),
    Endpoint(
        "page-recommendations",
        "get",
        page("/planner/pipelines/{w.pipeline.pk}/"),
        gate("viewer", 200, page=True),
        session=True,
    ),
    Endpoint(
        "page-planner-apply",
        "post",
        page("/planner/pipelines/{w.pipeline.pk}/apply"),
        gate("operator", 302, page=True),
        payload=lambda w: {"what": "k_policy"},
        session=True,
    ),
]


@pytest.mark.parametrize(
    "endpoint,persona",
    [pytest.param(e, p, id=f"{e.name}-{p}") for e in ENDPOINTS for p in PERSONAS],
)
def test_permissions(endpoint, persona, personas):
    world = PipelineWorld(personas)
    url = endpoint.url(world)
    payload = endpoint.payload(world)
    client = world.client(persona, session=endpoint.session)
    kwargs = {} if endpoint.session or payload is None else {"format": "json"}
    args = () if payload is None else (payload,)
    response = getattr(client, endpoint.method)(url, *args, **kwargs)
    expected = endpoint.expect[persona]
    assert response.status_code == expected, (
        f"{endpoint.method.upper()} {url} as {persona}: expected {expected}, "
        f"got {response.status_code}: {getattr(response, 'content', b'')[:300]!r}"
    )
