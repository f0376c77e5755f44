"""One pass of learning from traffic (the beat's `tandem.learning.tick`): purge what passed
its retention, fail trainings that were lost, and for each pipeline capture new pairs, judge
a canary, watch the promoted draft, and start the next training when enough pairs came."""

from __future__ import annotations

import logging
from datetime import datetime

from django.core.exceptions import ValidationError
from django.utils import timezone

from inference.learning import canary, services
from inference.learning.models import DraftStatus, DraftVersion, LearningPolicy

logger = logging.getLogger(__name__)


def tick(*, now: datetime | None = None) -> dict:
    now = now or timezone.now()
    report: dict = {"purged": services.purge(now=now), "lost": services.training_lost(now=now)}
    report |= {"captured": 0, "decided": [], "rolled_back": 0, "started": []}
    for version in DraftVersion.objects.filter(status=DraftStatus.CANDIDATE).select_related(
        "pipeline"
    ):
        verdict = canary.evaluate(version, now=now)
        if verdict:
            report["decided"].append((version.pipeline.name, version.number, verdict))
    for version in DraftVersion.objects.filter(status=DraftStatus.PROMOTED).select_related(
        "pipeline"
    ):
        report["rolled_back"] += canary.watch(version, now=now)
    for policy in LearningPolicy.objects.filter(enabled=True).select_related("pipeline"):
        report["captured"] += services.capture(policy=policy, now=now)
        if services.new_pairs(policy.pipeline) < policy.min_pairs:
            continue
        try:
            version = services.training_start(pipeline_id=policy.pipeline_id, actor=services.ACTOR)
        except ValidationError:  # one trains or is canaried: the next waits for it
            continue
        report["started"].append((policy.pipeline.name, version.number))
    return report
