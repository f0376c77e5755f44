"""The REST operations as the OpenAPI schema lists them, with real objects in their paths."""

from __future__ import annotations

import re

from drf_spectacular.generators import SchemaGenerator

from fleet.nodes.services import node_token_rotate


def api_schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def operations(schema: dict, *, methods=("post", "put", "patch", "delete", "get")):
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            if method in methods:
                yield method, path, op


def body_properties(schema: dict, op: dict) -> dict:
    """The request body's top-level properties (name -> schema), $refs resolved."""
    content = op.get("requestBody", {}).get("content", {}).get("application/json", {})
    body = content.get("schema", {})
    while "$ref" in body:
        body = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
    return body.get("properties", {})


def concrete_path(path: str, world: dict) -> str:
    """`/api/v1/pipelines/{id}/nodes/{node_id}/move` with the world's pipeline and node."""
    owner_of_id = [
        ("/api-keys/", world["api_key"].pk),
        ("/wall-links/", world["wall_link"].pk),
        ("/nodes/{id}", world["node"].pk),
        ("/pipelines/{id}", world["pipeline"].pk),
    ]
    ids = {
        "node_id": world["node"].pk,
        "slug": world["profile"].slug,
        "generation_id": world["generation"].id,
    }
    for marker, pk in owner_of_id:
        if marker in path:
            ids["id"] = pk
            break
    return re.sub(r"\{(\w+)\}", lambda m: str(ids[m.group(1)]), path)


def headers_for(path: str, world: dict, admin_headers: dict) -> dict:
    """A node's own token for its heartbeat, the admin's key everywhere else."""
    if path.endswith("/heartbeat"):
        _token, plain = node_token_rotate(node=world["node"])
        return {"HTTP_AUTHORIZATION": f"Bearer {plain}"}
    return admin_headers
