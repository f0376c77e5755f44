import pytest

from fleet.nodes.models import HardwareProfile, Node
from fleet.nodes.selectors import node_for_token
from fleet.nodes.services import node_retire
from tests.factories import make_node

pytestmark = pytest.mark.django_db

NEW_NODE = {
    "name": "draft-corsair-01",
    "profile": "d-matrix-corsair",
    "roles": ["draft"],
    "labels": {"zone": "eu-west", "rack": "r12"},
    "address": "10.0.0.12",
}


@pytest.fixture
def carol(as_persona):
    return as_persona("admin")


@pytest.fixture
def alice(as_persona):
    return as_persona("viewer")


def test_admin_registers_a_node_and_gets_its_token_once(carol):
    response = carol.post("/api/v1/nodes", NEW_NODE, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    node = Node.objects.get(name="draft-corsair-01")
    assert node_for_token(body["token"]) == node
    assert body["state"] == "registered" and body["version"] == 1
    assert body["profile"] == "d-matrix-corsair" and body["profile_kind"] == "sram-accelerator"
    assert response["ETag"] == '"1"'
    again = carol.get(f"/api/v1/nodes/{node.pk}").json()
    assert "token" not in again


@pytest.mark.parametrize(
    "change,field",
    [
        ({"name": "Bad Name!"}, "name"),
        ({"name": ""}, "name"),
        ({"profile": "no-such-device"}, "profile"),
        ({"roles": []}, "roles"),
        ({"roles": ["draft", "cook"]}, "roles"),
        ({"roles": "draft"}, "roles"),
        ({"labels": {"zone": 1}}, "labels"),
        ({"labels": {"bad key": "x"}}, "labels"),
        ({"labels": ["zone"]}, "labels"),
        ({"simulated": "perhaps"}, "simulated"),
    ],
)
def test_invalid_registration_is_400_with_field_errors(carol, change, field):
    response = carol.post("/api/v1/nodes", {**NEW_NODE, **change}, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not Node.objects.exists()


def test_duplicate_name_is_400(carol):
    make_node(name="draft-corsair-01")
    response = carol.post("/api/v1/nodes", NEW_NODE, format="json")
    assert response.status_code == 400 and "name" in response.json()


def test_patch_with_current_version_then_stale_version_is_409(carol):
    node, _ = make_node()
    url = f"/api/v1/nodes/{node.pk}"
    etag = carol.get(url)["ETag"]
    response = carol.patch(url, {"labels": {"rack": "r1"}}, format="json", HTTP_IF_MATCH=etag)
    assert response.status_code == 200 and response.json()["version"] == 2
    assert response["ETag"] == '"2"'
    stale = carol.patch(url, {"labels": {"rack": "r2"}}, format="json", HTTP_IF_MATCH=etag)
    assert stale.status_code == 409
    assert "version 2, not 1" in stale.json()["detail"]
    stale = carol.patch(url, {"address": "x", "version": 1}, format="json")
    assert stale.status_code == 409
    ok = carol.patch(url, {"roles": ["verify", "draft"], "version": 2}, format="json")
    assert ok.status_code == 200 and ok.json()["roles"] == ["draft", "verify"]
    assert Node.objects.get(pk=node.pk).labels == {"rack": "r1"}


def test_patch_bad_if_match_is_400_and_disagreeing_versions_409(carol):
    node, _ = make_node()
    url = f"/api/v1/nodes/{node.pk}"
    assert carol.patch(url, {}, format="json", HTTP_IF_MATCH="abc").status_code == 400
    response = carol.patch(url, {"version": 1}, format="json", HTTP_IF_MATCH='"3"')
    assert response.status_code == 409
    assert carol.patch(url, {}, format="json", HTTP_IF_MATCH="*").status_code == 200


def test_patch_cannot_touch_state_or_agent_fields(carol):
    node, _ = make_node()
    response = carol.patch(
        f"/api/v1/nodes/{node.pk}",
        {"state": "online", "last_seen": "2020-01-01T00:00:00Z", "agent_version": "x"},
        format="json",
    )
    assert response.status_code == 200
    node.refresh_from_db()
    assert (node.state, node.last_seen, node.agent_version, node.version) == (
        "registered",
        None,
        "",
        1,
    )


def test_state_actions_and_illegal_transitions_are_409_with_the_reason(as_persona, carol):
    node, _ = make_node()
    bob = as_persona("operator")
    base = f"/api/v1/nodes/{node.pk}"
    assert bob.post(f"{base}/drain").json()["state"] == "draining"
    assert bob.post(f"{base}/return").json()["state"] == "online"
    response = bob.post(f"{base}/return")
    assert response.status_code == 409
    assert response.json()["detail"] == (
        f"Node '{node.name}' cannot go from 'online' to 'online' "
        "(only a draining node can do this)."
    )
    assert bob.post(f"{base}/drain", HTTP_IF_MATCH='"1"').status_code == 409  # stale
    assert carol.post(f"{base}/retire").json()["state"] == "retired"
    response = bob.post(f"{base}/drain")
    assert response.status_code == 409 and "retired is final" in response.json()["detail"]
    assert carol.delete(base).status_code == 409


def test_delete_retires_softly(carol):
    node, plain = make_node()
    assert carol.delete(f"/api/v1/nodes/{node.pk}").status_code == 204
    node.refresh_from_db()
    assert node.state == "retired"
    assert node_for_token(plain) is None
    assert carol.get(f"/api/v1/nodes/{node.pk}").json()["state"] == "retired"


@pytest.mark.parametrize(
    "method,path",
    [
        ("get", "/api/v1/nodes/424242"),
        ("patch", "/api/v1/nodes/424242"),
        ("delete", "/api/v1/nodes/424242"),
        ("post", "/api/v1/nodes/424242/drain"),
        ("post", "/api/v1/nodes/424242/return"),
        ("post", "/api/v1/nodes/424242/retire"),
        ("get", "/api/v1/nodes/424242/tokens"),
        ("post", "/api/v1/nodes/424242/token/rotate"),
        ("post", "/api/v1/nodes/424242/token/revoke"),
        ("get", "/api/v1/nodes/99999999999999999999999"),
        ("get", "/api/v1/nodes/abc"),
        ("get", "/api/v1/profiles/no-such-device"),
        ("patch", "/api/v1/profiles/no-such-device"),
    ],
)
def test_unknown_ids_are_404(carol, method, path):
    response = getattr(carol, method)(path, {}, format="json")
    assert response.status_code == 404


def _seed_fleet():
    make_node(name="verify-h100-a", roles=["verify"], labels={"zone": "eu", "rack": "r1"})
    make_node(name="verify-h200-b", profile="h200", roles=["verify"], labels={"zone": "us"})
    make_node(name="draft-corsair-a", profile="d-matrix-corsair", roles=["draft"])
    make_node(
        name="draft-groq-sim",
        profile="groq-lpu",
        roles=["draft", "verify"],
        simulated=True,
        labels={"zone": "eu"},
    )
    retired, _ = make_node(name="old-l40s", profile="l40s", roles=["draft"])
    node_retire(node=retired)


@pytest.mark.parametrize(
    "query,names",
    [
        ("state=retired", ["old-l40s"]),
        ("state=registered&state=retired", None),  # all five
        ("role=draft", ["draft-corsair-a", "draft-groq-sim", "old-l40s"]),
        ("role=verify", ["draft-groq-sim", "verify-h100-a", "verify-h200-b"]),
        ("kind=sram-accelerator", ["draft-corsair-a", "draft-groq-sim"]),
        ("label=zone:eu", ["draft-groq-sim", "verify-h100-a"]),
        ("label=zone:eu&label=rack:r1", ["verify-h100-a"]),
        ("label=zone:", []),
        ("simulated=true", ["draft-groq-sim"]),
        ("search=H100", ["verify-h100-a"]),
        ("profile=h200", ["verify-h200-b"]),
        ("role=draft&kind=gpu", ["old-l40s"]),
        ("ordering=-name&kind=gpu", ["verify-h200-b", "verify-h100-a", "old-l40s"]),
    ],
)
def test_filters(alice, query, names):
    _seed_fleet()
    response = alice.get(f"/api/v1/nodes?{query}")
    assert response.status_code == 200, response.json()
    got = [n["name"] for n in response.json()["results"]]
    if names is None:
        assert len(got) == 5
    elif query.startswith("ordering"):
        assert got == names
    else:
        assert sorted(got) == names


@pytest.mark.parametrize(
    "query,field",
    [
        ("state=sleeping", "state"),
        ("role=cook", "role"),
        ("kind=tpu", "kind"),
        ("label=nocolon", "label"),
    ],
)
def test_bad_filters_are_400(alice, query, field):
    response = alice.get(f"/api/v1/nodes?{query}")
    assert response.status_code == 400
    assert field in response.json()


def test_pagination(alice):
    """Pages by cursor (no count, no offset: see tests/nodes/test_node_list_cursor.py)."""
    _seed_fleet()
    page = alice.get("/api/v1/nodes?limit=2").json()
    assert set(page) == {"next", "previous", "results"} and len(page["results"]) == 2
    assert page["previous"] is None and "cursor=" in page["next"]
    assert page["results"][1]["name"] == "draft-groq-sim"  # ordered by name
    second = alice.get(page["next"]).json()
    assert second["results"][0]["name"] == "old-l40s" and second["previous"]


def test_list_query_count_is_constant(alice, django_assert_max_num_queries):
    alice.get("/api/v1/nodes")  # warm up: the persona's role lookup, API key last-used
    for i in range(30):
        make_node(name=f"n-{i}", profile=["h100-sxm", "groq-lpu", "l40s"][i % 3])
    with django_assert_max_num_queries(4):
        response = alice.get("/api/v1/nodes?limit=100")
    assert len(response.json()["results"]) == 30


def test_profiles_read_for_viewers_and_edited_by_admins(alice, carol):
    listing = alice.get("/api/v1/profiles?kind=sram-accelerator").json()
    slugs = [p["slug"] for p in listing["results"]]
    assert "d-matrix-corsair" in slugs and "h100-sxm" not in slugs
    h100 = alice.get("/api/v1/profiles/h100-sxm").json()
    assert h100["memory_bandwidth_gbs"] == 3350 and h100["sources"]["memory_bandwidth_gbs"]
    response = carol.patch(
        "/api/v1/profiles/h100-sxm",
        {"usd_per_hour": 2.49, "sources": {"usd_per_hour": "our contract"}},
        format="json",
    )
    assert response.status_code == 200
    assert HardwareProfile.objects.get(slug="h100-sxm").usd_per_hour == 2.49
    new = {
        "slug": "mi300x",
        "kind": "gpu",
        "vendor": "AMD",
        "model": "Instinct MI300X",
        "memory_gb": 192,
        "memory_bandwidth_gbs": 5300,
        "peak_bf16_tflops": 1307.4,
        "tdp_w": 750,
        "idle_w": 90,
        "sources": {"memory_gb": "AMD MI300X datasheet"},
    }
    assert carol.post("/api/v1/profiles", new, format="json").status_code == 201
    assert carol.post("/api/v1/profiles", new, format="json").status_code == 400  # slug taken
    bad = carol.post("/api/v1/profiles", {**new, "slug": "x", "memory_gb": -1}, format="json")
    assert bad.status_code == 400 and "memory_gb" in bad.json()
    bad = carol.post("/api/v1/profiles", {**new, "slug": "y", "kind": "tpu"}, format="json")
    assert bad.status_code == 400 and "kind" in bad.json()
    assert carol.delete("/api/v1/profiles/mi300x").status_code == 405


def test_schema_of_the_registry_generates_without_warnings():
    """Scoped to this app's routes: other apps' warnings are theirs to fix (the whole
    project is checked by `manage.py spectacular --validate --fail-on-warn`)."""
    from django.urls import include, path
    from drf_spectacular.drainage import GENERATOR_STATS
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.validation import validate_schema

    GENERATOR_STATS.reset()
    patterns = [path("api/v1/", include("fleet.nodes.urls_api"))]
    schema = SchemaGenerator(patterns=patterns).get_schema(request=None, public=True)
    validate_schema(schema)
    assert not GENERATOR_STATS, (GENERATOR_STATS._warn_cache, GENERATOR_STATS._error_cache)
    assert "/api/v1/nodes/{id}/heartbeat" in schema["paths"]
    assert "nodeToken" in schema["components"]["securitySchemes"]
