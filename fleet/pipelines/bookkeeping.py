"""What every change to a pipeline does, whichever service makes it: lock the row(s), check
the caller's version, bump it with a PipelineRevision, write an AuditEvent (who, before,
after, why), and push the committed configuration to the running workers after commit
(`outbox`: recorded with the change, then `signals.config_committed`).

`actor` is a user, or a label string for automation (the planner acts as "planner").
"""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError

from fleet.nodes.models import Node
from fleet.pipelines import outbox
from fleet.pipelines.models import Pipeline, PipelineRevision, Placement
from fleet.pipelines.rules import StaleVersion

logger = logging.getLogger(__name__)

# --- push to workers ---------------------------------------------------------------------------


def push_after_commit(*pipeline_ids: int) -> None:
    """A change of the pipeline's configuration: every worker of it gets it, after commit,
    through the outbox (recorded in this transaction, retried until delivered)."""
    for pid in dict.fromkeys(pipeline_ids):
        outbox.record(pid, None)


def push_to_nodes_after_commit(pipeline_id: int, node_ids: list[int]) -> None:
    """A change of which nodes serve the pipeline (place, move, drain, return): the
    pipeline's configuration and version go to the nodes that changed, after commit, through
    the outbox. The other workers' configuration is the same; routing reads placements and
    node states from the database. (Pushing to all of a 2,500-node pipeline costs seconds
    per action.)"""
    outbox.record(pipeline_id, list(node_ids))


def locked_pipeline(pipeline_id: int) -> Pipeline:
    try:
        pipeline = Pipeline.objects.select_for_update().get(pk=pipeline_id)
    except Pipeline.DoesNotExist as exc:
        raise ValidationError({"pipeline": f"no pipeline {pipeline_id}"}) from exc
    record_current(pipeline)
    return pipeline


def record_current(pipeline: Pipeline) -> None:
    """Write the revision of the pipeline's current version if it has none. A pipeline made
    outside `pipeline_create` (the local demo's rows, the simulator's) starts without one:
    recorded before its first change, its first configuration stays restorable."""
    if not PipelineRevision.objects.filter(pipeline=pipeline, version=pipeline.version).exists():
        made = pipeline.created_at if pipeline.version == 1 else pipeline.updated_at
        PipelineRevision.objects.create(
            pipeline=pipeline, version=pipeline.version, config=snapshot(pipeline), created_at=made
        )


def locked_node(node_id: int) -> Node:
    try:
        return Node.objects.select_for_update().select_related("profile").get(pk=node_id)
    except Node.DoesNotExist as exc:
        raise ValidationError({"node": f"no node {node_id}"}) from exc


def check_version(pipeline: Pipeline, expected: int | None) -> None:
    if expected is not None and int(expected) != pipeline.version:
        raise StaleVersion(pipeline, int(expected))


def placements_snapshot(pipeline: Pipeline) -> list[dict]:
    rows = Placement.objects.filter(pipeline=pipeline).order_by("node_id")
    return [
        {"node": node_id, "name": name, "role": role}
        for node_id, name, role in rows.values_list("node_id", "node__name", "role")
    ]


def snapshot(pipeline: Pipeline) -> dict:
    """Configuration plus placements: what a revision stores and the audit log compares."""
    return {**pipeline.config(), "placements": placements_snapshot(pipeline)}


def bump(pipeline: Pipeline, update_fields: list[str] | None = None) -> None:
    pipeline.version += 1
    fields = ["version", "updated_at", *(update_fields or [])]
    pipeline.save(update_fields=list(dict.fromkeys(fields)))
    PipelineRevision.objects.create(
        pipeline=pipeline, version=pipeline.version, config=snapshot(pipeline)
    )


def changed(before: dict, after: dict) -> tuple[dict, dict]:
    keys = [k for k in after if before.get(k) != after.get(k)]
    return {k: before.get(k) for k in keys}, {k: after.get(k) for k in keys}
