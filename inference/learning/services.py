"""Every state change of learning from traffic: keyword-only, atomic, audited (the pipelines'
`fleet.audit.services.audit`, so each step is a chart marker), side effects after commit.

Draft changes go through the pipelines' audited door (`pipeline_swap_draft`); a canary's
start and end push the configuration (the drafters read `canary` in it) through the outbox.
The canary's decisions live in `canary.py`; this module holds the policy, capture, purge and
the training's life.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial

from celery import current_app
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from fleet.audit.services import audit
from fleet.pipelines import bookkeeping
from fleet.pipelines.models import Pipeline
from inference.learning.launch import TRAIN_QUEUE
from inference.learning.models import (
    CapturedPair,
    DraftStatus,
    DraftVersion,
    LearningPolicy,
)
from inference.learning.selectors import promoted_of
from inference.models import Generation, GenerationState

ACTOR = "learning"
POLICY_FIELDS = (
    "enabled",
    "retention_hours",
    "min_pairs",
    "max_pairs",
    "train_minutes",
    "canary_fraction",
    "promote_margin",
    "min_canary_tokens",
)
VERSIONS_DIR = "learned"  # draft versions: DATA_DIR/models/learned/<pipeline>-v<n>
CAPTURE_LAG = timedelta(seconds=1)  # a finish in the same second may still be committing


def _policy_dict(p: LearningPolicy) -> dict:
    return {f: getattr(p, f) for f in POLICY_FIELDS}


@transaction.atomic
def learning_configure(
    *, pipeline_id: int, actor, changes: dict, reason: str = ""
) -> LearningPolicy:
    """Switch learning on or off, or change its limits. Switched on, capture starts now
    (earlier traffic is not taken)."""
    pipeline = bookkeeping.locked_pipeline(pipeline_id)
    unknown = set(changes) - set(POLICY_FIELDS)
    if unknown:
        raise ValidationError({k: "not a learning setting" for k in sorted(unknown)})
    policy, _ = LearningPolicy.objects.select_for_update().get_or_create(pipeline=pipeline)
    before = _policy_dict(policy)
    for key, value in changes.items():
        setattr(policy, key, value)
    policy.full_clean(exclude=["pipeline"])
    if policy.enabled and not before["enabled"]:
        policy.captured_until = timezone.now()
    policy.save()
    b, a = bookkeeping.changed(before, _policy_dict(policy))
    if a:
        audit(actor=actor, action="learning", pipeline=pipeline, before=b, after=a, reason=reason)
    return policy


@transaction.atomic
def capture(*, policy: LearningPolicy, now: datetime | None = None) -> int:
    """Pairs from the pipeline's generations finished since the last capture (with output,
    not already taken); moves the policy's watermark. Returns how many."""
    now = now or timezone.now()
    until = now - CAPTURE_LAG
    since = policy.captured_until or until
    rows = Generation.objects.filter(
        pipeline_id=policy.pipeline_id,
        state=GenerationState.FINISHED,
        finished_at__gte=since,
        finished_at__lt=until,
    ).values_list("id", "user_id", "prompt_tokens", "output_tokens", "finished_at")
    taken = set(
        CapturedPair.objects.filter(generation_id__in=[r[0] for r in rows]).values_list(
            "generation_id", flat=True
        )
    )
    pairs = [
        CapturedPair(
            pipeline_id=policy.pipeline_id,
            generation_id=gid,
            user_id=uid,
            prompt_tokens=prompt,
            output_tokens=output,
            created_at=at or until,
        )
        for gid, uid, prompt, output, at in rows
        if gid not in taken and output and prompt
    ]
    CapturedPair.objects.bulk_create(pairs)
    LearningPolicy.objects.filter(pk=policy.pk).update(captured_until=until)
    policy.captured_until = until
    return len(pairs)


def purge(*, now: datetime | None = None) -> int:
    """Delete every pair older than its pipeline's retention (learning on or off: a policy
    switched off keeps its limit). Returns how many."""
    now = now or timezone.now()
    deleted = 0
    for pipeline_id, hours in LearningPolicy.objects.values_list("pipeline_id", "retention_hours"):
        old = CapturedPair.objects.filter(
            pipeline_id=pipeline_id, created_at__lt=now - timedelta(hours=hours)
        )
        deleted += old.delete()[0]
    return deleted


def new_pairs(pipeline: Pipeline) -> int:
    """Pairs captured since the newest draft version was started."""
    last = DraftVersion.objects.filter(pipeline=pipeline).order_by("-number").first()
    pairs = CapturedPair.objects.filter(pipeline=pipeline)
    if last is not None:
        pairs = pairs.filter(created_at__gte=last.created_at)
    return pairs.count()


@transaction.atomic
def training_start(*, pipeline_id: int, actor, reason: str = "") -> DraftVersion:
    """The next draft version, in training: its row, an audit event, and after commit the
    training task on the `train` queue. Refused while a version trains or is canaried."""
    pipeline = bookkeeping.locked_pipeline(pipeline_id)
    busy = DraftVersion.objects.filter(
        pipeline=pipeline, status__in=(DraftStatus.TRAINING, DraftStatus.CANDIDATE)
    ).first()
    if busy is not None:
        raise ValidationError({"pipeline": f"draft v{busy.number} is still {busy.status}"})
    number = 1 + max(
        DraftVersion.objects.filter(pipeline=pipeline).values_list("number", flat=True),
        default=0,
    )
    parent = promoted_of(pipeline)
    version = DraftVersion.objects.create(
        pipeline=pipeline,
        number=number,
        parent=parent,
        path=f"{VERSIONS_DIR}/{pipeline.name}-v{number}",
    )
    audit(
        actor=actor,
        action="draft_train",
        pipeline=pipeline,
        after={"draft_version": number, "parent": parent.number if parent else None},
        reason=reason or "training the next draft on captured traffic",
    )
    transaction.on_commit(partial(_enqueue, version.pk))
    return version


def _enqueue(version_id: int) -> None:
    # by the task's name: the task module imports the services that call this
    result = current_app.send_task("tandem.learning.train", args=[version_id], queue=TRAIN_QUEUE)
    DraftVersion.objects.filter(pk=version_id, task_id="").update(task_id=result.id or "")


def _claim(version_id: int, frm: str, to: str) -> DraftVersion | None:
    version = DraftVersion.objects.select_for_update().filter(pk=version_id).first()
    if version is None or version.status != frm:
        return None
    version.check_transition(to)
    version.status = to
    return version


@transaction.atomic
def training_finished(*, version_id: int, manifest: dict) -> DraftVersion | None:
    """training -> candidate: its canary starts (the drafters get it with the configuration).
    None when the version is no longer training (e.g. declared lost meanwhile)."""
    version = _claim(version_id, DraftStatus.TRAINING, DraftStatus.CANDIDATE)
    if version is None:
        return None
    now = timezone.now()
    version.heldout_agreement_before = manifest.get("heldout_agreement_before")
    version.heldout_agreement = manifest.get("heldout_agreement")
    version.train_pairs = int(manifest.get("train_pairs") or 0)
    version.detail = {**version.detail, "manifest": manifest, "canary_since": now.isoformat()}
    version.save()
    audit(
        actor=ACTOR,
        action="draft_canary",
        pipeline=version.pipeline,
        after={
            "draft_version": version.number,
            "heldout_agreement": version.heldout_agreement,
            "canary_fraction": LearningPolicy.objects.get(
                pipeline=version.pipeline
            ).canary_fraction,
        },
        reason=f"draft v{version.number} trained on {version.train_pairs} pairs: canary starts",
    )
    bookkeeping.push_after_commit(version.pipeline_id)
    return version


@transaction.atomic
def training_failed(*, version_id: int, error: str) -> DraftVersion | None:
    """training -> failed; nothing served changes."""
    version = _claim(version_id, DraftStatus.TRAINING, DraftStatus.FAILED)
    if version is None:
        return None
    version.decided_at = timezone.now()
    version.detail = {**version.detail, "error": error[:2000]}
    version.save()
    audit(
        actor=ACTOR,
        action="draft_failed",
        pipeline=version.pipeline,
        after={"draft_version": version.number},
        reason=f"training draft v{version.number} failed: {error[:300]}",
    )
    return version


def training_lost(*, now: datetime | None = None) -> int:
    """Versions training for much longer than their budget (the task was killed, its worker
    lost): failed, so the next one may start."""
    now = now or timezone.now()
    lost = 0
    for version in DraftVersion.objects.filter(status=DraftStatus.TRAINING).select_related(
        "pipeline"
    ):
        minutes = (
            LearningPolicy.objects.filter(pipeline=version.pipeline)
            .values_list("train_minutes", flat=True)
            .first()
            or 3.0
        )
        if version.created_at < now - timedelta(minutes=2 * minutes + 10):
            lost += (
                training_failed(version_id=version.pk, error="the training task was lost")
                is not None
            )
    return lost
