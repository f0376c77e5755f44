"""Every change to a pipeline: keyword-only, atomic, audited, pushed to workers after commit.

This module holds the pipeline's own settings (create, configure, k policy, batch caps,
draft model, rollback); `node_actions.py` the nodes in it (place, move, unplace, drain,
return), re-exported here so callers have one `services`; `bookkeeping.py` the bookkeeping
both share.

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

from fleet.audit.services import audit
from fleet.pipelines import bookkeeping
from fleet.pipelines.bookkeeping import snapshot  # noqa: F401  (re-exported)
from fleet.pipelines.models import CONFIG_FIELDS, DrafterKind, Pipeline, PipelineRevision
from fleet.pipelines.node_actions import (  # noqa: F401  (re-exported: one `services` for callers)
    node_drain,
    node_move,
    node_place,
    node_return,
    node_unplace,
)
from fleet.pipelines.rules import (  # noqa: F401  (the refusals, allowed_roles: re-exported)
    ActionRefused,
    StaleVersion,
    allowed_roles,
    check_power,
    placed_power_w,
    validate_config,
)

logger = logging.getLogger(__name__)

PLANNER = "planner"
# Fields `pipeline_update` accepts (CONFIG_FIELDS plus the descriptive ones).
EDITABLE_FIELDS = frozenset(CONFIG_FIELDS) | {"description"}


# --- pipelines -----------------------------------------------------------------------------


@transaction.atomic
def pipeline_create(
    *, actor, reason: str = "", check_model_refs: bool = True, **fields
) -> Pipeline:
    """A new pipeline at version 1: its revision 1 and a "create" audit event. Every pipeline
    is made here (the API, the pages, this machine's local pipelines, the simulator)."""
    unknown = set(fields) - EDITABLE_FIELDS - {"name", "simulated"}
    if unknown:
        raise ValidationError({k: "unknown field" for k in unknown})
    fields = validate_config(fields, check_model_refs=check_model_refs)
    pipeline = Pipeline(**fields)
    pipeline.full_clean()
    pipeline.save()
    PipelineRevision.objects.create(
        pipeline=pipeline, version=pipeline.version, config=bookkeeping.snapshot(pipeline)
    )
    audit(actor=actor, action="create", pipeline=pipeline, after=pipeline.config(), reason=reason)
    bookkeeping.push_after_commit(pipeline.pk)
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
    pipeline = bookkeeping.locked_pipeline(pipeline_id)
    bookkeeping.check_version(pipeline, expected_version)
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
    b, a = bookkeeping.changed(before, after)
    if not a:
        return pipeline  # nothing changed: no version, no audit row, no push
    bookkeeping.bump(
        pipeline, list(changes) + (["draft_model"] if "drafter_kind" in changes else [])
    )
    audit(actor=actor, action=action, pipeline=pipeline, before=b, after=a, reason=reason)
    bookkeeping.push_after_commit(pipeline.pk)
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
    pipeline = bookkeeping.locked_pipeline(pipeline_id)
    bookkeeping.check_version(pipeline, expected_version)
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
    b, a = bookkeeping.changed(before, pipeline.config())
    bookkeeping.bump(pipeline, list(restored))
    audit(
        actor=actor,
        action="rollback",
        pipeline=pipeline,
        before=b,
        after={**a, "restored_version": to_version},
        reason=reason,
    )
    bookkeeping.push_after_commit(pipeline.pk)
    return pipeline
