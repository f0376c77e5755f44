from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.nodes.choices import NodeState
from fleet.nodes.models import Node
from fleet.nodes.services import node_transition, nodes_mark_lost
from tests.nodes.conftest import GOOD_TELEMETRY, agent_client, make_node

pytestmark = pytest.mark.django_db

DEVICE = {"torch_device": "cuda:0", "name": "NVIDIA H100 80GB HBM3", "memory_gb": 79.6}


def beat(client, node, payload=None):
    return client.post(f"/api/v1/nodes/{node.pk}/heartbeat", payload or {}, format="json")


def test_first_heartbeat_registers_the_agent_and_brings_the_node_online(agent, node):
    response = beat(
        agent,
        node,
        {"agent_version": "0.1.0", "device_info": DEVICE},
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["state"] == "online" and body["node"] == node.pk
    assert body["config_version"] == 2 and body["roles"] == ["verify"]
    assert body["heartbeat_period_s"] > 0
    node.refresh_from_db()
    assert node.state == NodeState.ONLINE and node.last_seen is not None
    assert (node.agent_version, node.device_info) == ("0.1.0", DEVICE)


def test_liveness_only_heartbeats_do_not_bump_the_version(agent, node):
    beat(agent, node)
    version = Node.objects.get(pk=node.pk).version
    beat(agent, node, {"agent_version": "0.1.0"})
    beat(agent, node, {"device_info": DEVICE})
    node.refresh_from_db()
    assert node.version == version


def test_draining_stays_draining_and_lost_comes_back(agent, node):
    beat(agent, node)
    node_transition(node=node, to=NodeState.DRAINING)
    assert beat(agent, node).json()["state"] == "draining"
    Node.objects.filter(pk=node.pk).update(last_seen=timezone.now() - timedelta(hours=1))
    assert nodes_mark_lost() == [node.pk]
    assert beat(agent, node).json()["state"] == "online"


def test_figures_in_a_heartbeat_are_refused_not_dropped(agent, node):
    """One vocabulary: a node's figures travel as signed samples only. A heartbeat that still
    carries them (an agent from before) is told so with a 400, and changes nothing."""
    response = beat(agent, node, {"telemetry": GOOD_TELEMETRY})
    assert response.status_code == 400
    assert "signed samples" in response.json()["telemetry"][0]
    node.refresh_from_db()
    assert node.last_seen is None


@pytest.mark.parametrize(
    "payload,field",
    [
        ({"device_info": "H100"}, "device_info"),
        ({"device_info": {"blob": "x" * 10_000}}, "device_info"),
        ({"agent_version": "v" * 100}, "agent_version"),
        ({"telemetry": [1, 2]}, "telemetry"),
    ],
)
def test_invalid_heartbeat_is_400(agent, node, payload, field):
    response = beat(agent, node, payload)
    assert response.status_code == 400 and field in response.json()


def test_malformed_json_is_400_not_500(agent, node):
    response = agent.post(
        f"/api/v1/nodes/{node.pk}/heartbeat", "{not json", content_type="application/json"
    )
    assert response.status_code == 400


def test_a_node_token_works_only_for_its_own_node(agent, node):
    other, _ = make_node()
    assert beat(agent, other).status_code == 403
    assert agent.post("/api/v1/nodes/999999/heartbeat", {}, format="json").status_code == 403
    other.refresh_from_db()
    assert other.last_seen is None


def test_a_node_token_gets_403_on_user_endpoints(agent, node):
    assert agent.get("/api/v1/nodes").status_code == 403
    assert agent.get(f"/api/v1/nodes/{node.pk}").status_code == 403
    assert agent.post(f"/api/v1/nodes/{node.pk}/token/rotate").status_code == 403
    assert agent.patch(f"/api/v1/nodes/{node.pk}", {"labels": {}}, format="json").status_code == 403


def test_users_cannot_send_heartbeats(as_persona, node):
    assert beat(as_persona("admin"), node).status_code == 403
    assert beat(as_persona("anonymous"), node).status_code == 401


def test_mark_lost_turns_only_aged_watched_nodes_lost(settings):
    settings.HEARTBEAT_PERIOD_S, settings.HEARTBEAT_TOLERANCE = 5, 3
    now = timezone.now()
    old, fresh = now - timedelta(seconds=16), now - timedelta(seconds=5)
    nodes = {}
    for name, state, seen in [
        ("aged-online", "online", old),
        ("aged-draining", "draining", old),
        ("fresh-online", "online", fresh),
        ("aged-registered", "registered", None),
        ("aged-retired", "retired", old),
    ]:
        node, _ = make_node(name=name)
        Node.objects.filter(pk=node.pk).update(state=state, last_seen=seen)
        nodes[name] = node
    lost = nodes_mark_lost(now=now)
    assert sorted(lost) == sorted([nodes["aged-online"].pk, nodes["aged-draining"].pk])
    states = dict(Node.objects.values_list("name", "state"))
    assert states["aged-online"] == states["aged-draining"] == "lost"
    assert states["fresh-online"] == "online"
    assert states["aged-registered"] == "registered"
    assert states["aged-retired"] == "retired"
    assert Node.objects.get(pk=nodes["aged-online"].pk).version == 2
    assert nodes_mark_lost(now=now) == []


def test_mark_lost_task_calls_the_service():
    from fleet.nodes.tasks import nodes_mark_lost as task

    node, plain = make_node()
    agent_client(plain).post(f"/api/v1/nodes/{node.pk}/heartbeat", {}, format="json")
    Node.objects.filter(pk=node.pk).update(last_seen=timezone.now() - timedelta(hours=1))
    assert task.apply().get() == 1
    assert Node.objects.get(pk=node.pk).state == "lost"
