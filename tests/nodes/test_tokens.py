import pytest

from fleet.accounts.secrets import digest
from fleet.nodes.models import NodeToken
from fleet.nodes.selectors import node_for_token
from fleet.nodes.services import node_retire, node_token_revoke, node_token_rotate
from tests.nodes.conftest import agent_client, make_node

pytestmark = pytest.mark.django_db


def test_token_is_shown_once_and_stored_hashed():
    node, plain = make_node()
    token = NodeToken.objects.get(node=node)
    assert plain.startswith(f"tdn_{token.prefix}_")
    assert token.token_hash == digest(plain)
    assert plain not in str(list(NodeToken.objects.values()))
    assert node_for_token(plain) == node


@pytest.mark.parametrize(
    "bad",
    ["tdn_nope", "tdn_00000000_secret", "tdm_00000000_x", "", "tdn__"],
)
def test_unknown_tokens_find_no_node(bad):
    make_node()
    assert node_for_token(bad) is None


def test_wrong_secret_with_a_real_prefix_finds_no_node():
    _, plain = make_node()
    assert node_for_token(plain[:-2] + "xx") is None


def test_rotate_revokes_the_old_token_and_issues_a_new_one():
    node, old = make_node()
    token, new = node_token_rotate(node=node)
    assert new != old and new.startswith(f"tdn_{token.prefix}_")
    assert node_for_token(old) is None
    assert node_for_token(new) == node
    assert NodeToken.objects.filter(node=node, revoked_at__isnull=True).count() == 1


def test_revoke_and_retire_end_the_agents_access():
    node, plain = make_node()
    assert node_token_revoke(node=node) == 1
    assert node_for_token(plain) is None
    node2, plain2 = make_node()
    node_retire(node=node2)
    assert node_for_token(plain2) is None
    assert not NodeToken.objects.filter(node=node2, revoked_at__isnull=True).exists()


def test_revoked_and_wrong_tokens_are_401_on_the_api():
    node, plain = make_node()
    url = f"/api/v1/nodes/{node.pk}/heartbeat"
    assert agent_client(plain).post(url, {}, format="json").status_code == 200
    node_token_revoke(node=node)
    response = agent_client(plain).post(url, {}, format="json")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert agent_client("tdn_deadbeef_nope").post(url, {}).status_code == 401


def test_token_endpoints(as_persona):
    node, old = make_node()
    carol = as_persona("admin")
    response = carol.post(f"/api/v1/nodes/{node.pk}/token/rotate")
    assert response.status_code == 201
    new = response.json()["token"]
    assert node_for_token(new) == node and node_for_token(old) is None
    listing = carol.get(f"/api/v1/nodes/{node.pk}/tokens").json()
    assert [t["active"] for t in listing] == [True, False]
    assert all("token" not in t and "token_hash" not in t for t in listing)
    assert carol.post(f"/api/v1/nodes/{node.pk}/token/revoke").json() == {"revoked": 1}
    assert node_for_token(new) is None
    carol.post(f"/api/v1/nodes/{node.pk}/retire")
    response = carol.post(f"/api/v1/nodes/{node.pk}/token/rotate")
    assert response.status_code == 409
