"""The training of one draft version, as the `train` worker runs it: the recent pairs, the
draft it starts from (the promoted version, else the pipeline's own learned draft, else a
draft cut from the target), `inference.training.online` (torch, imported here, never in the
web process), then the version's next state. The new version gets its own directory, written
whole: a failure or a kill leaves whatever serves untouched."""

from __future__ import annotations

import logging

from inference.learning import services
from inference.learning.models import CapturedPair, DraftStatus, DraftVersion, LearningPolicy

logger = logging.getLogger(__name__)


def start_ref(version: DraftVersion) -> str | None:
    if version.parent is not None and version.parent.path:
        return version.parent.path
    pipeline = version.pipeline
    if pipeline.drafter_kind == "model" and pipeline.draft_model:
        return pipeline.draft_model
    return None


def run(version_id: int) -> None:
    version = (
        DraftVersion.objects.select_related("pipeline", "parent").filter(pk=version_id).first()
    )
    if version is None or version.status != DraftStatus.TRAINING:
        return
    policy = LearningPolicy.objects.get(pipeline=version.pipeline)
    pairs = list(
        CapturedPair.objects.filter(pipeline=version.pipeline)
        .order_by("-created_at")
        .values_list("prompt_tokens", "output_tokens")[: policy.max_pairs]
    )
    try:
        from inference.training.online import OnlineRecipe, distil_on_pairs
        from inference.worker.engine_cache import model_dir

        start = start_ref(version)
        manifest = distil_on_pairs(
            model_dir(version.pipeline.target_model),
            model_dir(start) if start else None,
            pairs,
            model_dir(version.path),
            recipe=OnlineRecipe(minutes=policy.train_minutes),
            log=lambda line: logger.info("draft v%s: %s", version.number, line.strip()),
        )
    except Exception as exc:
        logger.exception("training draft v%s of %s failed", version.number, version.pipeline)
        services.training_failed(version_id=version.pk, error=f"{type(exc).__name__}: {exc}")
        return
    manifest["start"] = start
    services.training_finished(version_id=version.pk, manifest=manifest)
