"""Who may do what, on every endpoint of the node registry: one table, exact status codes.

Each row is an `Endpoint`: a method, a URL factory and a payload factory (both take a
`World` of fresh objects), and the status every persona must get. Each (row, persona)
pair runs as its own test against its own fresh objects, so a successful write by one
persona never changes what the next one sees.

To extend it for another app: add rows to `ENDPOINTS` (or build your own list and
parametrize `check` over it), and give `World` a cached property for the objects your
URLs need (a pipeline, a generation, ...). `gate()` writes the common case: personas
below a role get 403 (anonymous 401 for the API, a login redirect for pages).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import pytest
from django.test import Client
from rest_framework.test import APIClient

from fleet.nodes.models import Node
from tests.conftest import client_for
from tests.nodes.conftest import agent_client, make_node

PERSONAS = ("anonymous", "outsider", "viewer", "operator", "admin", "node")
ROLE_ORDER = ("viewer", "operator", "admin")


class World:
    """Fresh objects for one request. `node` is the node whose agent is the "node" persona."""

    def __init__(self, users: dict):
        self.users = users

    @cached_property
    def _node_and_token(self):
        return make_node(name="matrix-node", labels={"zone": "eu"})

    @property
    def node(self):
        return self._node_and_token[0]

    @cached_property
    def other_node(self):
        return make_node(name="matrix-other", profile="d-matrix-corsair", roles=["draft"])[0]

    def node_in(self, state: str):
        Node.objects.filter(pk=self.node.pk).update(state=state)
        return self.node

    def client(self, persona: str, *, session: bool = False):
        if persona == "node":
            return Client() if session else agent_client(self._node_and_token[1])
        user = self.users.get(persona)
        if not session:
            return client_for(user) if user else APIClient()
        client = Client()
        if user:
            client.force_login(user)
        return client


@dataclass(frozen=True)
class Endpoint:
    name: str
    method: str
    url: Callable[[World], str]
    expect: dict[str, int]
    payload: Callable[[World], dict | None] = field(default=lambda w: None)
    session: bool = False  # a page: session login instead of a Bearer key, form-encoded

    def __post_init__(self):
        assert set(self.expect) == set(PERSONAS), f"{self.name}: give every persona a status"


def gate(min_role: str, ok: int, *, node: int = 403, page: bool = False) -> dict[str, int]:
    """`ok` for `min_role` and above, 403 below; anonymous 401 (API) or 302 (pages)."""
    allowed = ROLE_ORDER[ROLE_ORDER.index(min_role) :]
    codes = {p: (ok if p in allowed else 403) for p in ("outsider", *ROLE_ORDER)}
    return {**codes, "anonymous": 302 if page else 401, "node": 302 if page else node}


def agent_only(ok: int, *, node: int | None = None) -> dict[str, int]:
    """Node-agent endpoints: users (even admins) 403, anonymous 401, the agent `ok`."""
    users = dict.fromkeys(("outsider", *ROLE_ORDER), 403)
    return {**users, "anonymous": 401, "node": ok if node is None else node}


def api(path: str) -> Callable[[World], str]:
    return lambda w: "/api/v1/" + path.format(w=w)


NEW_NODE = {"name": "matrix-new", "profile": "h100-sxm", "roles": ["verify"]}
NEW_PROFILE = {
    "slug": "matrix-gpu",
    "kind": "gpu",
    "vendor": "Acme",
    "model": "X1",
    "memory_gb": 80,
    "memory_bandwidth_gbs": 3000,
    "peak_bf16_tflops": 900,
    "tdp_w": 700,
    "idle_w": 60,
}
HEARTBEAT = {"agent_version": "0.1.0"}

ENDPOINTS = [
    # --- nodes --------------------------------------------------------------------------
    Endpoint("nodes-list", "get", api("nodes"), gate("viewer", 200)),
    Endpoint("nodes-retrieve", "get", api("nodes/{w.node.pk}"), gate("viewer", 200)),
    Endpoint("nodes-create", "post", api("nodes"), gate("admin", 201), payload=lambda w: NEW_NODE),
    Endpoint(
        "nodes-patch",
        "patch",
        api("nodes/{w.node.pk}"),
        gate("admin", 200),
        payload=lambda w: {"labels": {"zone": "us"}},
    ),
    Endpoint("nodes-delete-retires", "delete", api("nodes/{w.node.pk}"), gate("admin", 204)),
    Endpoint("nodes-drain", "post", api("nodes/{w.node.pk}/drain"), gate("operator", 200)),
    Endpoint(
        "nodes-return",
        "post",
        lambda w: f"/api/v1/nodes/{w.node_in('draining').pk}/return",
        gate("operator", 200),
    ),
    Endpoint("nodes-retire", "post", api("nodes/{w.node.pk}/retire"), gate("admin", 200)),
    Endpoint("nodes-tokens", "get", api("nodes/{w.node.pk}/tokens"), gate("admin", 200)),
    Endpoint(
        "nodes-token-rotate", "post", api("nodes/{w.node.pk}/token/rotate"), gate("admin", 201)
    ),
    Endpoint(
        "nodes-token-revoke", "post", api("nodes/{w.node.pk}/token/revoke"), gate("admin", 200)
    ),
    Endpoint(
        "nodes-heartbeat-own",
        "post",
        api("nodes/{w.node.pk}/heartbeat"),
        agent_only(200),
        payload=lambda w: HEARTBEAT,
    ),
    Endpoint(
        "nodes-heartbeat-other",
        "post",
        api("nodes/{w.other_node.pk}/heartbeat"),
        agent_only(403),
        payload=lambda w: HEARTBEAT,
    ),
    # --- hardware profiles --------------------------------------------------------------
    Endpoint("profiles-list", "get", api("profiles"), gate("viewer", 200)),
    Endpoint("profiles-retrieve", "get", api("profiles/h100-sxm"), gate("viewer", 200)),
    Endpoint(
        "profiles-create",
        "post",
        api("profiles"),
        gate("admin", 201),
        payload=lambda w: NEW_PROFILE,
    ),
    Endpoint(
        "profiles-patch",
        "patch",
        api("profiles/h100-sxm"),
        gate("admin", 200),
        payload=lambda w: {"usd_per_hour": 2.5},
    ),
    # --- pages --------------------------------------------------------------------------
    Endpoint(
        "page-node-list", "get", lambda w: "/nodes/", gate("viewer", 200, page=True), session=True
    ),
    Endpoint(
        "page-node-detail",
        "get",
        lambda w: f"/nodes/{w.node.pk}/",
        gate("viewer", 200, page=True),
        session=True,
    ),
    Endpoint(
        "page-register-form",
        "get",
        lambda w: "/nodes/register",
        gate("admin", 200, page=True),
        session=True,
    ),
    Endpoint(
        "page-register-post",
        "post",
        lambda w: "/nodes/register",
        gate("admin", 200, page=True),
        payload=lambda w: {"name": "matrix-form", "profile": "l40s", "roles": ["draft"]},
        session=True,
    ),
]


def check(endpoint: Endpoint, persona: str, users: dict) -> None:
    world = World(users)
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


@pytest.mark.parametrize(
    "endpoint,persona",
    [pytest.param(e, p, id=f"{e.name}-{p}") for e in ENDPOINTS for p in PERSONAS],
)
def test_permissions_matrix(endpoint, persona, personas):
    check(endpoint, persona, personas)
