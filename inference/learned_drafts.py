"""The control plane's side of learned drafts: which model directory a `train_draft` target
names, and putting a freshly trained draft into service through the pipelines' audited door
(`pipeline_swap_draft`), never by writing the pipeline row. Imports no torch."""

from __future__ import annotations

from pathlib import Path

from django.db import transaction

from fleet.pipelines.model_refs import model_dir
from fleet.pipelines.models import DrafterKind, Pipeline, PipelineRevision
from fleet.pipelines.services import pipeline_swap_draft

ACTOR = "train_draft"


def resolve_target(target: str) -> tuple[Pipeline | None, Path]:
    """`target` is a pipeline's name (its target model) or a model reference (a directory
    under DATA_DIR/models, or an absolute path): (the pipeline or None, the directory). A
    model directory that exists needs no database."""
    direct = model_dir(target)
    if (direct / "config.json").exists():
        return None, direct
    pipeline = Pipeline.objects.filter(name=target).first()
    return pipeline, model_dir(pipeline.target_model) if pipeline else direct


@transaction.atomic
def serve_learned_draft(*, pipeline: Pipeline, draft_model: str, reason: str) -> bool:
    """Make `draft_model` the pipeline's draft when the pipeline still drafts as it was made
    to (n-gram or none) and has never served it before: an operator who went back to the
    n-gram drafter is not overruled by the next `up`. True when it swapped."""
    row = Pipeline.objects.select_for_update().get(pk=pipeline.pk)
    if row.drafter_kind == DrafterKind.MODEL:
        return False
    served = PipelineRevision.objects.filter(pipeline=row, config__draft_model=draft_model).exists()
    if served:
        return False
    pipeline_swap_draft(
        pipeline_id=row.pk,
        actor=ACTOR,
        drafter_kind=DrafterKind.MODEL,
        draft_model=draft_model,
        expected_version=row.version,
        reason=reason,
    )
    return True
