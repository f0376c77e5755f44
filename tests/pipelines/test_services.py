"""Pipeline actions: validation, version checks (409), audit rows, revisions, rollback,
and the push to workers after commit."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from fleet.audit.models import AuditEvent
from fleet.nodes.models import Node
from fleet.pipelines import outbox, services
from fleet.pipelines.models import Pipeline, PipelineRevision, Placement
from fleet.pipelines.services import ActionRefused, StaleVersion
from tests.factories import make_pipeline, online_node, place

pytestmark = pytest.mark.django_db


@pytest.fixture
def pushed(monkeypatch):
    """Records the pipelines pushed to workers (after commit)."""
    calls = []
    monkeypatch.setattr(
        outbox,
        "push_config",  # a pipeline id (every worker), or (pipeline id, the nodes pushed to)
        lambda pid, node_ids=None: calls.append(pid if node_ids is None else (pid, *node_ids)),
    )
    return calls


def test_set_k_policy_bumps_version_writes_revision_audit_and_pushes(
    pipeline, operator, pushed, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        p = services.pipeline_set_k_policy(
            pipeline_id=pipeline.pk,
            actor=operator,
            k_policy={"mode": "fixed", "k": 2},
            expected_version=1,
            reason="batch grew",
        )
    assert p.version == 2 and p.k_policy == {"mode": "fixed", "k": 2}
    rev = PipelineRevision.objects.get(pipeline=p, version=2)
    assert rev.config["k_policy"] == {"mode": "fixed", "k": 2}
    event = AuditEvent.objects.get(pipeline=p, action="set_k_policy")
    assert event.actor == operator and event.actor_label == "bob"
    assert event.before == {"k_policy": {"mode": "fixed", "k": 4}}
    assert event.after == {"k_policy": {"mode": "fixed", "k": 2}}
    assert event.reason == "batch grew"
    assert pushed == [p.pk]


def test_no_push_when_the_transaction_rolls_back(
    pipeline, operator, pushed, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(StaleVersion):
            services.pipeline_set_k_policy(
                pipeline_id=pipeline.pk,
                actor=operator,
                k_policy={"mode": "fixed", "k": 2},
                expected_version=7,
            )
    assert pushed == []
    assert Pipeline.objects.get(pk=pipeline.pk).version == 1
    assert not AuditEvent.objects.exists()


def test_invalid_policy_is_a_field_error(pipeline, operator):
    with pytest.raises(ValidationError) as exc:
        services.pipeline_set_k_policy(
            pipeline_id=pipeline.pk, actor=operator, k_policy={"mode": "fixed", "k": 99}
        )
    assert "k_policy" in exc.value.message_dict


def test_batch_caps(pipeline, operator):
    p = services.pipeline_set_batch_caps(
        pipeline_id=pipeline.pk, actor=operator, max_verify_batch=64, max_batch_wait_ms=2
    )
    assert (p.max_verify_batch, p.max_batch_wait_ms, p.version) == (64, 2, 2)
    with pytest.raises(ValidationError):
        services.pipeline_set_batch_caps(
            pipeline_id=pipeline.pk, actor=operator, max_verify_batch=0
        )


def test_place_checks_roles_of_the_profile(pipeline, operator):
    sram = online_node(profile="d-matrix-corsair", roles=("draft",))
    with pytest.raises(ValidationError) as exc:
        services.node_place(pipeline_id=pipeline.pk, node_id=sram.pk, role="verify", actor=operator)
    assert "role" in exc.value.message_dict
    verify_only = online_node(roles=("verify",))
    with pytest.raises(ValidationError):
        services.node_place(
            pipeline_id=pipeline.pk, node_id=verify_only.pk, role="draft", actor=operator
        )
    placement = services.node_place(
        pipeline_id=pipeline.pk,
        node_id=verify_only.pk,
        role="verify",
        actor=operator,
        reason="more verify",
    )
    assert placement.pipeline == pipeline
    event = AuditEvent.objects.get(action="place")
    assert event.node == verify_only and event.after == {"pipeline": "main", "role": "verify"}


def test_place_refuses_retired_and_lost_nodes(pipeline, operator):
    node = online_node()
    Node.objects.filter(pk=node.pk).update(state="retired")
    with pytest.raises(ValidationError):
        services.node_place(pipeline_id=pipeline.pk, node_id=node.pk, role="verify", actor=operator)
    lost = online_node()
    Node.objects.filter(pk=lost.pk).update(state="lost")
    with pytest.raises(ActionRefused):
        services.node_place(pipeline_id=pipeline.pk, node_id=lost.pk, role="verify", actor=operator)
    services.node_place(
        pipeline_id=pipeline.pk, node_id=lost.pk, role="verify", actor=operator, force=True
    )


def test_power_budget(operator):
    p = make_pipeline(power_budget_w=1000)
    a, b = online_node(), online_node()
    services.node_place(pipeline_id=p.pk, node_id=a.pk, role="verify", actor=operator)  # 700 W
    with pytest.raises(ValidationError) as exc:
        services.node_place(
            pipeline_id=p.pk, node_id=b.pk, role="verify", actor=operator, force=True
        )
    assert "power_budget_w" in exc.value.message_dict
    with pytest.raises(ValidationError):
        services.pipeline_update(pipeline_id=p.pk, actor=operator, changes={"power_budget_w": 500})


def test_last_healthy_verifier_and_drafter_stay_unless_forced(pipeline, operator):
    verifier = pipeline.placements.get(role="verify").node
    drafter = pipeline.placements.get(role="draft").node
    with pytest.raises(ActionRefused, match="last healthy verifier"):
        services.node_drain(node_id=verifier.pk, actor=operator)
    with pytest.raises(ActionRefused, match="last healthy drafter"):
        services.node_unplace(node_id=drafter.pk, actor=operator)
    services.node_drain(node_id=verifier.pk, actor=operator, force=True, reason="maintenance")
    assert Node.objects.get(pk=verifier.pk).state == "draining"
    event = AuditEvent.objects.get(action="drain")
    assert event.before == {"state": "online"} and event.after == {"state": "draining"}


def test_drain_and_return(pipeline, operator):
    extra = online_node()
    place(pipeline, extra, "verify")
    services.node_drain(node_id=extra.pk, actor=operator)
    with pytest.raises(ActionRefused):
        services.node_drain(node_id=extra.pk, actor=operator)
    node = services.node_return(node_id=extra.pk, actor=operator)
    assert node.state == "online"
    with pytest.raises(ActionRefused):  # only draining nodes return
        services.node_return(node_id=extra.pk, actor=operator)
    assert [e.action for e in AuditEvent.objects.order_by("id")] == ["drain", "return"]


def test_move_between_pipelines(pipeline, operator, pushed, django_capture_on_commit_callbacks):
    other = make_pipeline(name="other")
    extra = online_node()
    place(pipeline, extra, "verify")
    with django_capture_on_commit_callbacks(execute=True):
        services.node_move(
            node_id=extra.pk, to_pipeline_id=other.pk, actor=operator, expected_version=1
        )
    assert Placement.objects.get(node=extra).pipeline == other
    assert Pipeline.objects.get(pk=pipeline.pk).version == 2
    assert Pipeline.objects.get(pk=other.pk).version == 2
    assert pushed == [other.pk]  # its new pipeline: every worker learns its new peer
    # audited on both pipelines (issue 24.5), as one change at one time
    events = AuditEvent.objects.filter(action="move", node=extra)
    assert {e.pipeline_id for e in events} == {pipeline.pk, other.pk}
    assert len({e.created_at for e in events}) == 1
    for event in events:
        assert event.before["pipeline"] == "main" and event.after["pipeline"] == "other"
    with pytest.raises(StaleVersion):
        services.node_move(
            node_id=extra.pk, to_pipeline_id=pipeline.pk, actor=operator, expected_version=1
        )


def test_move_refuses_last_verifier(pipeline, operator):
    other = make_pipeline(name="other")
    verifier = pipeline.placements.get(role="verify").node
    with pytest.raises(ActionRefused):
        services.node_move(node_id=verifier.pk, to_pipeline_id=other.pk, actor=operator)


def test_place_a_node_of_another_pipeline_is_refused(pipeline, operator):
    other = make_pipeline(name="other")
    verifier = pipeline.placements.get(role="verify").node
    with pytest.raises(ActionRefused, match="move it instead"):
        services.node_place(
            pipeline_id=other.pk, node_id=verifier.pk, role="verify", actor=operator
        )


def test_rollback_restores_an_earlier_configuration(pipeline, operator):
    services.pipeline_set_k_policy(
        pipeline_id=pipeline.pk, actor=operator, k_policy={"mode": "fixed", "k": 2}
    )
    services.pipeline_set_batch_caps(pipeline_id=pipeline.pk, actor=operator, max_verify_batch=8)
    p = services.pipeline_rollback(
        pipeline_id=pipeline.pk, actor=operator, to_version=1, expected_version=3, reason="bad idea"
    )
    assert p.version == 4
    assert p.k_policy == {"mode": "fixed", "k": 4} and p.max_verify_batch == 32
    event = AuditEvent.objects.get(action="rollback")
    assert event.after["restored_version"] == 1 and event.reason == "bad idea"
    with pytest.raises(ValidationError):
        services.pipeline_rollback(pipeline_id=pipeline.pk, actor=operator, to_version=99)
    with pytest.raises(StaleVersion):
        services.pipeline_rollback(
            pipeline_id=pipeline.pk, actor=operator, to_version=2, expected_version=3
        )


def test_swap_draft_checks_tokenizer_compatibility(tmp_path, settings, pipeline, operator):
    import json

    settings.DATA_DIR = tmp_path
    for name, vocab in (
        ("t", {"a": 0, "b": 1}),
        ("d-same", {"a": 0, "b": 1}),
        ("d-other", {"a": 0, "c": 1}),
    ):
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / "tokenizer.json").write_text(
            json.dumps({"model": {"type": "BPE", "vocab": vocab}, "added_tokens": []})
        )
    services.pipeline_update(
        pipeline_id=pipeline.pk,
        actor=operator,
        changes={"target_model": "t", "draft_model": "d-same"},
    )
    with pytest.raises(ValidationError) as exc:
        services.pipeline_swap_draft(pipeline_id=pipeline.pk, actor=operator, draft_model="d-other")
    assert "different tokenizer" in exc.value.message_dict["draft_model"][0]
    p = services.pipeline_swap_draft(pipeline_id=pipeline.pk, actor=operator, drafter_kind="ngram")
    assert p.drafter_kind == "ngram" and p.draft_model == ""


def test_planner_actor_is_labelled(pipeline):
    services.pipeline_set_k_policy(
        pipeline_id=pipeline.pk, actor="planner", k_policy={"mode": "fixed", "k": 3}
    )
    event = AuditEvent.objects.get()
    assert event.actor is None and event.actor_label == "planner"


def test_unchanged_update_is_a_no_op(pipeline, operator):
    p = services.pipeline_update(
        pipeline_id=pipeline.pk, actor=operator, changes={"max_verify_batch": 32}
    )
    assert p.version == 1 and not AuditEvent.objects.exists()
