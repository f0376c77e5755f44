"""Every change to a pipeline: keyword-only, atomic, audited, pushed to workers after commit.

Each action locks the pipeline row(s), checks the caller's `expected_version` (a stale one is
a 409), validates (roles, node state, power budget, tokenizer compatibility, and that at
least one healthy drafter and verifier stay unless `force`), bumps the version, writes a
PipelineRevision and an AuditEvent (who, before, after, why), and pushes the new
configuration to the running workers with `transaction.on_commit`.

`actor` is a user, or a label string for automation (the planner acts as "planner").
"""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import transaction

from fleet.nodes.choices import NodeState
from fleet.nodes.models import Node, NodeConflict
from fleet.nodes.services import node_transition
from fleet.pipelines.models import (
    CONFIG_FIELDS,
    AuditEvent,
    DrafterKind,
    Pipeline,
    PipelineRevision,
    Placement,
)
from fleet.pipelines.rules import (  # noqa: F401  (StaleVersion, ActionRefused: re-exported)
    ActionRefused,
    StaleVersion,
    allowed_roles,
    check_keeps_healthy,
    check_placeable,
    check_power,
    healthy_counts,
    is_healthy,
    placed_power_w,
    validate_config,
)

logger = logging.getLogger(__name__)

PLANNER = "planner"
# Fields `pipeline_update` accepts (CONFIG_FIELDS plus the descriptive ones).
EDITABLE_FIELDS = frozenset(CONFIG_FIELDS) | {"description"}


# --- push to workers ---------------------------------------------------------------------------


def push_config(pipeline_id: int) -> None:
    """Sends the committed configuration to the running workers (through the data plane's
    `inference.services.push_pipeline_config`)."""
    from inference.services import push_pipeline_config  # the data plane imports this app

    pipeline = Pipeline.objects.filter(pk=pipeline_id).first()
    if pipeline is not None:
        push_pipeline_config(pipeline)


def _push_after_commit(*pipeline_ids: int) -> None:
    for pid in dict.fromkeys(pipeline_ids):
        transaction.on_commit(lambda pid=pid: push_config(pid))


# --- helpers -------------------------------------------------------------------------------


def _actor(actor) -> tuple[object | None, str]:
    if actor is None:
        return None, "system"
    if isinstance(actor, str):
        return None, actor
    return actor, actor.get_username()


def _locked(pipeline_id: int) -> Pipeline:
    try:
        return Pipeline.objects.select_for_update().get(pk=pipeline_id)
    except Pipeline.DoesNotExist as exc:
        raise ValidationError({"pipeline": f"no pipeline {pipeline_id}"}) from exc


def _locked_node(node_id: int) -> Node:
    try:
        return Node.objects.select_for_update().select_related("profile").get(pk=node_id)
    except Node.DoesNotExist as exc:
        raise ValidationError({"node": f"no node {node_id}"}) from exc


def _check_version(pipeline: Pipeline, expected: int | None) -> None:
    if expected is not None and int(expected) != pipeline.version:
        raise StaleVersion(pipeline, int(expected))


def placements_snapshot(pipeline: Pipeline) -> list[dict]:
    rows = Placement.objects.filter(pipeline=pipeline).select_related("node").order_by("node_id")
    return [{"node": p.node_id, "name": p.node.name, "role": p.role} for p in rows]


def snapshot(pipeline: Pipeline) -> dict:
    """Configuration plus placements: what a revision stores and the audit log compares."""
    return {**pipeline.config(), "placements": placements_snapshot(pipeline)}


def _bump(pipeline: Pipeline, update_fields: list[str] | None = None) -> None:
    pipeline.version += 1
    fields = ["version", "updated_at", *(update_fields or [])]
    pipeline.save(update_fields=list(dict.fromkeys(fields)))
    PipelineRevision.objects.create(
        pipeline=pipeline, version=pipeline.version, config=snapshot(pipeline)
    )


def _audit(*, actor, action: str, pipeline=None, node=None, before=None, after=None, reason=""):
    user, label = _actor(actor)
    return AuditEvent.objects.create(
        actor=user,
        actor_label=label,
        action=action,
        pipeline=pipeline,
        node=node,
        before=before or {},
        after=after or {},
        reason=reason or "",
    )


def _changed(before: dict, after: dict) -> tuple[dict, dict]:
    keys = [k for k in after if before.get(k) != after.get(k)]
    return {k: before.get(k) for k in keys}, {k: after.get(k) for k in keys}


# --- pipelines -----------------------------------------------------------------------------


@transaction.atomic
def pipeline_create(*, actor, reason: str = "", **fields) -> Pipeline:
    unknown = set(fields) - EDITABLE_FIELDS - {"name", "simulated"}
    if unknown:
        raise ValidationError({k: "unknown field" for k in unknown})
    fields = validate_config(fields)
    pipeline = Pipeline(**fields)
    pipeline.full_clean()
    pipeline.save()
    PipelineRevision.objects.create(
        pipeline=pipeline, version=pipeline.version, config=snapshot(pipeline)
    )
    _audit(actor=actor, action="create", pipeline=pipeline, after=pipeline.config(), reason=reason)
    _push_after_commit(pipeline.pk)
    return pipeline


@transaction.atomic
def pipeline_update(
    *,
    pipeline_id: int,
    actor,
    changes: dict,
    expected_version: int | None = None,
    reason: str = "",
    action: str = "update",
) -> Pipeline:
    """Change configuration fields (k policy, batch caps, SLOs, budget, models, auto mode)."""
    pipeline = _locked(pipeline_id)
    _check_version(pipeline, expected_version)
    unknown = set(changes) - EDITABLE_FIELDS
    if unknown:
        raise ValidationError({k: "not an editable field" for k in unknown})
    changes = validate_config(changes, current=pipeline)
    before = pipeline.config() | {"description": pipeline.description}
    for key, value in changes.items():
        setattr(pipeline, key, value)
    if pipeline.drafter_kind != DrafterKind.MODEL and "drafter_kind" in changes:
        pipeline.draft_model = changes.get("draft_model", "")
    pipeline.full_clean(exclude=["name"])
    if "power_budget_w" in changes:
        check_power(pipeline, placed_power_w(pipeline))
    after = pipeline.config() | {"description": pipeline.description}
    b, a = _changed(before, after)
    if not a:
        return pipeline  # nothing changed: no version, no audit row, no push
    _bump(pipeline, list(changes) + (["draft_model"] if "drafter_kind" in changes else []))
    _audit(actor=actor, action=action, pipeline=pipeline, before=b, after=a, reason=reason)
    _push_after_commit(pipeline.pk)
    return pipeline


def pipeline_set_k_policy(
    *, pipeline_id: int, actor, k_policy: dict, expected_version=None, reason=""
):
    return pipeline_update(
        pipeline_id=pipeline_id,
        actor=actor,
        changes={"k_policy": k_policy},
        expected_version=expected_version,
        reason=reason,
        action="set_k_policy",
    )


def pipeline_set_batch_caps(
    *,
    pipeline_id: int,
    actor,
    max_verify_batch=None,
    max_batch_wait_ms=None,
    expected_version=None,
    reason="",
):
    changes = {
        k: v
        for k, v in (
            ("max_verify_batch", max_verify_batch),
            ("max_batch_wait_ms", max_batch_wait_ms),
        )
        if v is not None
    }
    if not changes:
        raise ValidationError(
            {"max_verify_batch": "give max_verify_batch and/or max_batch_wait_ms"}
        )
    return pipeline_update(
        pipeline_id=pipeline_id,
        actor=actor,
        changes=changes,
        expected_version=expected_version,
        reason=reason,
        action="set_batch_caps",
    )


def pipeline_swap_draft(
    *,
    pipeline_id: int,
    actor,
    drafter_kind: str = DrafterKind.MODEL,
    draft_model: str = "",
    expected_version=None,
    reason="",
):
    return pipeline_update(
        pipeline_id=pipeline_id,
        actor=actor,
        changes={"drafter_kind": drafter_kind, "draft_model": draft_model},
        expected_version=expected_version,
        reason=reason,
        action="swap_draft",
    )


@transaction.atomic
def pipeline_rollback(
    *, pipeline_id: int, actor, to_version: int, expected_version=None, reason=""
):
    """Restore the configuration of an earlier revision (placements stay as they are: nodes
    may have moved on since). The rollback is itself a new version."""
    pipeline = _locked(pipeline_id)
    _check_version(pipeline, expected_version)
    revision = PipelineRevision.objects.filter(pipeline=pipeline, version=to_version).first()
    if revision is None:
        raise ValidationError(
            {"to_version": f"pipeline {pipeline.name!r} has no version {to_version}"}
        )
    if to_version >= pipeline.version:
        raise ValidationError({"to_version": "roll back to an earlier version"})
    before = pipeline.config()
    restored = {k: revision.config[k] for k in CONFIG_FIELDS if k in revision.config}
    for key, value in restored.items():
        setattr(pipeline, key, value)
    check_power(pipeline, placed_power_w(pipeline))
    b, a = _changed(before, pipeline.config())
    _bump(pipeline, list(restored))
    _audit(
        actor=actor,
        action="rollback",
        pipeline=pipeline,
        before=b,
        after={**a, "restored_version": to_version},
        reason=reason,
    )
    _push_after_commit(pipeline.pk)
    return pipeline


# --- placements and node actions -------------------------------------------------------------


@transaction.atomic
def node_place(
    *,
    pipeline_id: int,
    node_id: int,
    role: str,
    actor,
    expected_version=None,
    reason="",
    force: bool = False,
) -> Placement:
    """Put a node that serves no pipeline into this one as drafter or verifier (or change
    its role within this pipeline)."""
    pipeline = _locked(pipeline_id)
    _check_version(pipeline, expected_version)
    node = _locked_node(node_id)
    check_placeable(node, role, force=force)
    existing = Placement.objects.filter(node=node).select_related("pipeline").first()
    if existing and existing.pipeline_id != pipeline.pk:
        raise ActionRefused(
            f"{node.name} serves pipeline {existing.pipeline.name!r}; move it instead."
        )
    if existing and existing.role == role:
        raise ActionRefused(f"{node.name} is already a {role} node of {pipeline.name!r}.")
    if existing:  # role change inside the pipeline: it leaves its old role
        check_keeps_healthy(pipeline, leaving=node, force=force)
        before = {"role": existing.role}
        existing.role = role
        existing.save(update_fields=["role"])
        placement = existing
    else:
        check_power(pipeline, placed_power_w(pipeline, extra=node))
        before = {}
        placement = Placement.objects.create(pipeline=pipeline, node=node, role=role)
    _bump(pipeline)
    _audit(
        actor=actor,
        action="place",
        pipeline=pipeline,
        node=node,
        before=before,
        after={"pipeline": pipeline.name, "role": role},
        reason=reason,
    )
    _push_after_commit(pipeline.pk)
    return placement


@transaction.atomic
def node_move(
    *,
    node_id: int,
    to_pipeline_id: int,
    actor,
    role: str | None = None,
    expected_version=None,
    reason="",
    force: bool = False,
) -> Placement:
    """Move a placed node to another pipeline (same role unless `role` is given).
    `expected_version` is the *destination* pipeline's version."""
    node = _locked_node(node_id)
    current = Placement.objects.filter(node=node).first()
    if current is None:
        raise ValidationError({"node": f"{node.name} serves no pipeline; place it instead"})
    if current.pipeline_id == to_pipeline_id:
        raise ValidationError({"to_pipeline": f"{node.name} already serves that pipeline"})
    # Lock both pipelines in id order (no deadlock between two opposite moves).
    first, second = sorted([current.pipeline_id, to_pipeline_id])
    locked = {first: _locked(first), second: _locked(second)}
    source, dest = locked[current.pipeline_id], locked[to_pipeline_id]
    _check_version(dest, expected_version)
    role = role or current.role
    check_placeable(node, role, force=force)
    check_keeps_healthy(source, leaving=node, force=force)
    check_power(dest, placed_power_w(dest, extra=node))
    old_role = current.role
    current.delete()
    placement = Placement.objects.create(pipeline=dest, node=node, role=role)
    _bump(source)
    _bump(dest)
    _audit(
        actor=actor,
        action="move",
        pipeline=dest,
        node=node,
        before={"pipeline": source.name, "role": old_role},
        after={"pipeline": dest.name, "role": role},
        reason=reason,
    )
    _push_after_commit(source.pk, dest.pk)
    return placement


@transaction.atomic
def node_unplace(
    *, node_id: int, actor, expected_version=None, reason="", force: bool = False
) -> None:
    """Take a node out of its pipeline (back to the free pool)."""
    node = _locked_node(node_id)
    current = Placement.objects.filter(node=node).first()
    if current is None:
        raise ValidationError({"node": f"{node.name} serves no pipeline"})
    pipeline = _locked(current.pipeline_id)
    _check_version(pipeline, expected_version)
    check_keeps_healthy(pipeline, leaving=node, force=force)
    role = current.role
    current.delete()
    _bump(pipeline)
    _audit(
        actor=actor,
        action="unplace",
        pipeline=pipeline,
        node=node,
        before={"pipeline": pipeline.name, "role": role},
        after={},
        reason=reason,
    )
    _push_after_commit(pipeline.pk)


def _node_state_action(
    *, node_id, actor, to: str, action: str, expected_version, node_version, reason, force
):
    node = _locked_node(node_id)
    placement = Placement.objects.filter(node=node).first()
    pipeline = _locked(placement.pipeline_id) if placement else None
    if pipeline is not None:
        _check_version(pipeline, expected_version)
        if to == NodeState.DRAINING:
            check_keeps_healthy(pipeline, leaving=node, force=force)
    before = {"state": node.state}
    if to == NodeState.DRAINING and node.state == NodeState.DRAINING:
        raise ActionRefused(f"{node.name} is already draining.")
    only_from = frozenset({NodeState.DRAINING}) if to == NodeState.ONLINE else None
    try:
        node = node_transition(node=node, to=to, only_from=only_from, expected_version=node_version)
    except NodeConflict as exc:  # illegal transition, or a stale node version
        raise ActionRefused(str(exc), code=exc.code) from exc
    if pipeline is not None:
        _bump(pipeline)
        _push_after_commit(pipeline.pk)
    _audit(
        actor=actor,
        action=action,
        pipeline=pipeline,
        node=node,
        before=before,
        after={"state": node.state},
        reason=reason,
    )
    return node


@transaction.atomic
def node_drain(
    *,
    node_id: int,
    actor,
    expected_version: int | None = None,
    node_version: int | None = None,
    reason: str = "",
    force: bool = False,
) -> Node:
    """The node finishes the sequences it holds and takes no new ones. The one door for
    draining (REST under /nodes and /pipelines, pages, the planner): a placed node may not
    take the last healthy drafter or verifier away unless `force`; the change is audited and
    its pipeline's new version pushed. `expected_version` is the pipeline's, `node_version`
    the node's (its ETag)."""
    return _node_state_action(
        node_id=node_id,
        actor=actor,
        to=NodeState.DRAINING,
        action="drain",
        expected_version=expected_version,
        node_version=node_version,
        reason=reason,
        force=force,
    )


@transaction.atomic
def node_return(
    *,
    node_id: int,
    actor,
    expected_version: int | None = None,
    node_version: int | None = None,
    reason: str = "",
) -> Node:
    """A draining node takes new work again (only a draining node returns; a lost one comes
    back by itself with its next heartbeat). Audited and pushed like `node_drain`."""
    return _node_state_action(
        node_id=node_id,
        actor=actor,
        to=NodeState.ONLINE,
        action="return",
        expected_version=expected_version,
        node_version=node_version,
        reason=reason,
        force=False,
    )
