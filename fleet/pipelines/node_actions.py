"""The nodes of a pipeline: place, move, unplace, drain and return, keyword-only, atomic,
audited and pushed like every pipeline change (see `services.py`). Draining and returning are
the one door for a node's state: the REST node endpoints use them too.

They cost the same at any pipeline size: the rules count in the database (`exists`, `Sum`)
instead of loading the placements, the power budget is summed only when there is one, and
the after-commit push goes to every worker of the pipeline in one pipelined round trip: its
configuration carries the pipeline's members (`peers`), and a node reads round messages only
from the peers the control plane named (`inference.wire`), so a node placed, moved, drained or
returned must be known to the others (a verifier placed after its drafter booted was never read:
its sequences waited for drafts forever).
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from fleet.audit.services import audit
from fleet.nodes.choices import NodeState
from fleet.nodes.models import Node, NodeConflict
from fleet.nodes.services import node_transition, registry_changed_after_commit
from fleet.pipelines import bookkeeping
from fleet.pipelines.models import Placement
from fleet.pipelines.rules import (
    ActionRefused,
    check_keeps_healthy,
    check_placeable,
    check_power_with,
)


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
    pipeline = bookkeeping.locked_pipeline(pipeline_id)
    bookkeeping.check_version(pipeline, expected_version)
    node = bookkeeping.locked_node(node_id)
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
        check_power_with(pipeline, extra=node)
        before = {}
        placement = Placement.objects.create(pipeline=pipeline, node=node, role=role)
    bookkeeping.bump(pipeline)
    audit(
        actor=actor,
        action="place",
        pipeline=pipeline,
        node=node,
        before=before,
        after={"pipeline": pipeline.name, "role": role},
        reason=reason,
    )
    bookkeeping.push_after_commit(pipeline.pk)
    registry_changed_after_commit([node.pk])
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
    node = bookkeeping.locked_node(node_id)
    current = Placement.objects.filter(node=node).first()
    if current is None:
        raise ValidationError({"node": f"{node.name} serves no pipeline; place it instead"})
    if current.pipeline_id == to_pipeline_id:
        raise ValidationError({"to_pipeline": f"{node.name} already serves that pipeline"})
    # Lock both pipelines in id order (no deadlock between two opposite moves).
    first, second = sorted([current.pipeline_id, to_pipeline_id])
    locked = {
        first: bookkeeping.locked_pipeline(first),
        second: bookkeeping.locked_pipeline(second),
    }
    source, dest = locked[current.pipeline_id], locked[to_pipeline_id]
    bookkeeping.check_version(dest, expected_version)
    role = role or current.role
    check_placeable(node, role, force=force)
    check_keeps_healthy(source, leaving=node, force=force)
    check_power_with(dest, extra=node)
    old_role = current.role
    current.delete()
    placement = Placement.objects.create(pipeline=dest, node=node, role=role)
    bookkeeping.bump(source)
    bookkeeping.bump(dest)
    # one change seen from both pipelines: audited (and marked on the charts) on each, at
    # one time, so the node's own page shows it once
    at = timezone.now()
    for pipeline in (source, dest):
        audit(
            actor=actor,
            action="move",
            pipeline=pipeline,
            node=node,
            before={"pipeline": source.name, "role": old_role},
            after={"pipeline": dest.name, "role": role},
            reason=reason,
            at=at,
        )
    bookkeeping.push_after_commit(dest.pk)  # its new pipeline: config and peers for everyone
    registry_changed_after_commit([node.pk])  # the fleet view shows the move at once
    return placement


@transaction.atomic
def node_unplace(
    *, node_id: int, actor, expected_version=None, reason="", force: bool = False
) -> None:
    """Take a node out of its pipeline (back to the free pool)."""
    node = bookkeeping.locked_node(node_id)
    current = Placement.objects.filter(node=node).first()
    if current is None:
        raise ValidationError({"node": f"{node.name} serves no pipeline"})
    pipeline = bookkeeping.locked_pipeline(current.pipeline_id)
    bookkeeping.check_version(pipeline, expected_version)
    check_keeps_healthy(pipeline, leaving=node, force=force)
    role = current.role
    current.delete()
    bookkeeping.bump(pipeline)
    audit(
        actor=actor,
        action="unplace",
        pipeline=pipeline,
        node=node,
        before={"pipeline": pipeline.name, "role": role},
        after={},
        reason=reason,
    )
    # No push: the node serves no pipeline now, and the others' configuration is the same.
    registry_changed_after_commit([node.pk])


def _node_state_action(
    *, node_id, actor, to: str, action: str, expected_version, node_version, reason, force
):
    node = bookkeeping.locked_node(node_id)
    placement = Placement.objects.filter(node=node).first()
    pipeline = bookkeeping.locked_pipeline(placement.pipeline_id) if placement else None
    if pipeline is not None:
        bookkeeping.check_version(pipeline, expected_version)
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
        bookkeeping.bump(pipeline)
        bookkeeping.push_after_commit(pipeline.pk)
    audit(
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
