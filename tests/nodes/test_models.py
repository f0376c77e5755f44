from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from fleet.nodes.choices import TRANSITIONS, NodeState
from fleet.nodes.models import HardwareProfile, IllegalTransition, Node, StaleVersion
from fleet.nodes.services import node_retire, node_transition, node_update
from fleet.pipelines.rules import ActionRefused
from fleet.pipelines.services import node_drain, node_return
from tests.factories import make_node

S = NodeState
pytestmark = pytest.mark.django_db


def test_catalogue_is_seeded_with_sources_for_every_figure():
    slugs = set(HardwareProfile.objects.values_list("slug", flat=True))
    assert {"h100-sxm", "h200", "a100-80gb-sxm", "l40s", "d-matrix-corsair", "groq-lpu"} <= slugs
    assert "generic-cpu" in slugs
    figures = ["memory_gb", "memory_bandwidth_gbs", "peak_bf16_tflops", "tdp_w", "idle_w"]
    for profile in HardwareProfile.objects.all():
        for figure in figures:
            assert profile.sources.get(figure), f"{profile.slug}.{figure} has no source"
    corsair = HardwareProfile.objects.get(slug="d-matrix-corsair")
    groq = HardwareProfile.objects.get(slug="groq-lpu")
    assert corsair.kind == groq.kind == "sram-accelerator"
    assert (corsair.memory_gb, corsair.memory_bandwidth_gbs) == (2, 150_000)
    assert (groq.memory_gb, groq.memory_bandwidth_gbs) == (0.23, 80_000)


def test_every_state_has_a_row_in_the_transition_table():
    assert set(TRANSITIONS) == set(S.values)
    assert TRANSITIONS[S.RETIRED] == frozenset()


@pytest.mark.parametrize(
    "start,to,legal",
    [
        (S.REGISTERED, S.ONLINE, True),
        (S.ONLINE, S.DRAINING, True),
        (S.DRAINING, S.ONLINE, True),
        (S.ONLINE, S.LOST, True),
        (S.LOST, S.ONLINE, True),
        (S.ONLINE, S.RETIRED, True),
        (S.REGISTERED, S.LOST, False),
        (S.ONLINE, S.REGISTERED, False),
        (S.RETIRED, S.ONLINE, False),
        (S.RETIRED, S.RETIRED, False),
    ],
)
def test_transition_follows_the_table(start, to, legal):
    node = Node(name="n", state=start, version=4)
    if legal:
        node.transition(to)
        assert (node.state, node.version) == (to, 5)
    else:
        with pytest.raises(IllegalTransition, match=f"from '{start}' to '{to}'"):
            node.transition(to)
        assert (node.state, node.version) == (start, 4)


def test_services_persist_transitions_and_bump_the_version():
    node, _ = make_node()
    node = node_drain(node_id=node.pk, actor="test")
    assert Node.objects.get(pk=node.pk).state == S.DRAINING and node.version == 2
    node = node_return(node_id=node.pk, actor="test")
    assert node.state == S.ONLINE and node.version == 3
    with pytest.raises(IllegalTransition):  # only a draining node returns
        node_transition(node=node, to=S.ONLINE, only_from=frozenset({S.DRAINING}))
    with pytest.raises(ActionRefused, match="only a draining node"):
        node_return(node_id=node.pk, actor="test")
    node_retire(node=node)
    with pytest.raises(ActionRefused, match="retired is final"):
        node_drain(node_id=node.pk, actor="test")


def test_stale_version_is_refused():
    node, _ = make_node()
    node_update(node=node, labels={"rack": "r1"}, expected_version=1)
    with pytest.raises(StaleVersion):
        node_update(node=node, labels={"rack": "r2"}, expected_version=1)
    assert Node.objects.get(pk=node.pk).labels == {"rack": "r1"}


def test_update_without_change_keeps_the_version():
    node, _ = make_node(labels={"a": "b"})
    assert node_update(node=node, labels={"a": "b"}).version == 1


@pytest.mark.parametrize(
    "field,value",
    [
        ("name", "Bad Name"),
        ("name", "-leading-hyphen"),
        ("roles", []),
        ("roles", ["draft", "cook"]),
        ("labels", {"ok": 3}),
        ("labels", {"bad key!": "x"}),
    ],
)
def test_model_validation(field, value):
    kwargs = {"name": "good-name", "roles": ["draft"], "labels": {}, field: value}
    with pytest.raises(ValidationError) as info:
        make_node(**kwargs)
    assert field in info.value.message_dict


def test_roles_are_normalized_and_filterable_on_any_database():
    both, _ = make_node(roles=["verify", "draft", "draft"])
    drafter, _ = make_node(roles=["draft"], profile="d-matrix-corsair")
    verifier, _ = make_node(roles=["verify"])
    assert both.roles == ["draft", "verify"]
    assert set(Node.objects.with_role("draft")) == {both, drafter}
    assert set(Node.objects.with_role("verify")) == {both, verifier}


def test_liveness_is_period_times_tolerance(settings):
    settings.HEARTBEAT_PERIOD_S, settings.HEARTBEAT_TOLERANCE = 5, 3
    now = timezone.now()
    node = Node(name="n", state=S.ONLINE)
    assert not node.is_lost(now)  # never seen: not started yet
    node.last_seen = now - timedelta(seconds=14)
    assert not node.is_lost(now)
    node.last_seen = now - timedelta(seconds=16)
    assert node.is_lost(now)
    node.state = S.RETIRED
    assert not node.is_lost(now)
