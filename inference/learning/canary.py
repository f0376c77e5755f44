"""The canary of a candidate draft and the watch over a promoted one (Argo Rollouts' analysis
run, for drafts): measured, decided, audited.

- A candidate drafts `canary_fraction` of the sequences (`split.in_canary`); the rest draft
  with the serving draft in the same window: the pair of arms sees the same load. Once both
  arms drafted `min_canary_tokens`, the candidate is promoted when its acceptance is better
  by `promote_margin` (relative) and its goodput no worse than GOODPUT_TOLERANCE; rejected
  otherwise, or when the canary stays inconclusive past CANARY_MAX.
- A promoted version is watched over the recent WATCH_WINDOW: if its served acceptance
  collapses (below its canary acceptance by ROLLBACK_DROP and below what it replaced), e.g.
  after a worker reloaded a broken file, it is rolled back to the draft it replaced.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from fleet.audit.services import audit
from fleet.pipelines import bookkeeping
from fleet.pipelines.models import DrafterKind
from fleet.pipelines.services import pipeline_swap_draft
from inference.learning.models import DraftStatus, DraftVersion, IllegalDraftTransition
from inference.learning.selectors import Arm, measured_arms, policy_of

ACTOR = "learning"
GOODPUT_TOLERANCE = 0.05
CANARY_MAX = timedelta(minutes=30)
ROLLBACK_DROP = 0.25
WATCH_WINDOW = timedelta(minutes=5)


def _rel(new: float | None, old: float | None) -> float | None:
    if new is None or not old:
        return None
    return (new - old) / old


def decide(serving: Arm, canary: Arm, *, margin: float, min_tokens: int) -> str | None:
    """ "promote", "reject", or None (not enough measured yet)."""
    if serving.drafted < min_tokens or canary.drafted < min_tokens:
        return None
    gain = _rel(canary.acceptance, serving.acceptance)
    if gain is None:  # the serving draft accepted nothing: any acceptance is a gain
        gain = 1.0 if (canary.acceptance or 0) > 0 else 0.0
    goodput = _rel(canary.goodput_tps, serving.goodput_tps)
    if gain >= margin and (goodput is None or goodput >= -GOODPUT_TOLERANCE):
        return "promote"
    return "reject"


def _figures(serving: Arm, canary: Arm) -> dict:
    return {
        "canary_acceptance": canary.acceptance,
        "baseline_acceptance": serving.acceptance,
        "canary_goodput_tps": canary.goodput_tps,
        "baseline_goodput_tps": serving.goodput_tps,
    }


def _rounded(figures: dict) -> dict:
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in figures.items()}


def evaluate(version: DraftVersion, *, now: datetime | None = None) -> str | None:
    """Judge a candidate's canary; promote or reject it when decided."""
    now = now or timezone.now()
    since = parse_datetime(version.detail.get("canary_since") or "") or version.created_at
    policy = policy_of(version.pipeline)
    serving, canary = measured_arms(version.pipeline, since=since, fraction=policy.canary_fraction)
    verdict = decide(
        serving, canary, margin=policy.promote_margin, min_tokens=policy.min_canary_tokens
    )
    figures = _figures(serving, canary)
    if verdict is None and now - since > CANARY_MAX:
        verdict, why = "reject", "the canary stayed inconclusive"
    else:
        why = ""
    if verdict == "promote":
        promote(version_id=version.pk, figures=figures)
    elif verdict == "reject":
        reject(version_id=version.pk, figures=figures, why=why)
    return verdict


def _locked(version_id: int, to: str) -> DraftVersion | None:
    """The version, locked, when it may move to `to` now; None otherwise (decided already)."""
    version = DraftVersion.objects.select_for_update().filter(pk=version_id).first()
    if version is None:
        return None
    try:
        version.check_transition(to)
    except IllegalDraftTransition:
        return None
    return version


def _set_figures(version: DraftVersion, figures: dict) -> None:
    for key, value in figures.items():
        setattr(version, key, value)


@transaction.atomic
def promote(*, version_id: int, figures: dict) -> DraftVersion | None:
    """candidate -> promoted: the pipeline drafts with it (the audited swap), the version it
    supersedes retires; the canary ends with the swap's configuration push."""
    version = _locked(version_id, DraftStatus.PROMOTED)
    if version is None:
        return None
    pipeline = bookkeeping.locked_pipeline(version.pipeline_id)
    version.previous = {"drafter_kind": pipeline.drafter_kind, "draft_model": pipeline.draft_model}
    version.status, version.decided_at = DraftStatus.PROMOTED, timezone.now()
    version.detail = {**version.detail, "promoted_at": version.decided_at.isoformat()}
    _set_figures(version, figures)
    version.save()
    DraftVersion.objects.filter(pipeline=pipeline, status=DraftStatus.PROMOTED).exclude(
        pk=version.pk
    ).update(status=DraftStatus.RETIRED)
    shown = _rounded(figures)
    audit(
        actor=ACTOR,
        action="draft_promote",
        pipeline=pipeline,
        after={"draft_version": version.number, **shown},
        reason=(
            f"draft v{version.number} accepted {shown['canary_acceptance']} vs "
            f"{shown['baseline_acceptance']} in its canary"
        ),
    )
    pipeline_swap_draft(
        pipeline_id=pipeline.pk,
        actor=ACTOR,
        drafter_kind=DrafterKind.MODEL,
        draft_model=version.path,
        reason=f"draft v{version.number} promoted",
    )
    return version


@transaction.atomic
def reject(*, version_id: int, figures: dict, why: str = "") -> DraftVersion | None:
    """candidate -> rejected; the canary ends (configuration pushed), nothing else changes."""
    version = _locked(version_id, DraftStatus.REJECTED)
    if version is None:
        return None
    version.status, version.decided_at = DraftStatus.REJECTED, timezone.now()
    _set_figures(version, figures)
    version.save()
    shown = _rounded(figures)
    audit(
        actor=ACTOR,
        action="draft_reject",
        pipeline=version.pipeline,
        after={"draft_version": version.number, **shown},
        reason=why
        or (
            f"draft v{version.number} accepted {shown['canary_acceptance']} vs "
            f"{shown['baseline_acceptance']}: not better by the margin"
        ),
    )
    bookkeeping.push_after_commit(version.pipeline_id)
    return version


def watch(version: DraftVersion, *, now: datetime | None = None) -> bool:
    """A promoted version's served acceptance over the recent window (the serving arm when a
    newer candidate is canaried); rolls it back when it collapsed. True when rolled back."""
    now = now or timezone.now()
    promoted_at = parse_datetime(version.detail.get("promoted_at") or "") or version.decided_at
    since = max(promoted_at or now, now - WATCH_WINDOW)
    policy = policy_of(version.pipeline)
    candidate = DraftVersion.objects.filter(
        pipeline=version.pipeline, status=DraftStatus.CANDIDATE
    ).exists()
    serving, _ = measured_arms(
        version.pipeline, since=since, fraction=policy.canary_fraction if candidate else None
    )
    if serving.drafted < policy.min_canary_tokens or serving.acceptance is None:
        return False
    served = serving.acceptance
    DraftVersion.objects.filter(pk=version.pk).update(served_acceptance=served)
    expected = version.canary_acceptance
    replaced = version.baseline_acceptance
    if expected is None or served >= expected * (1 - ROLLBACK_DROP):
        return False
    if replaced is not None and served >= replaced:
        return False
    return rollback(version_id=version.pk, served=served) is not None


@transaction.atomic
def rollback(*, version_id: int, served: float, reason: str = "") -> DraftVersion | None:
    """promoted -> rolled back: the pipeline drafts with what the version replaced (the
    audited swap); the version it retired, if that was its parent, is promoted again."""
    version = _locked(version_id, DraftStatus.ROLLED_BACK)
    if version is None:
        return None
    pipeline = bookkeeping.locked_pipeline(version.pipeline_id)
    version.status, version.decided_at = DraftStatus.ROLLED_BACK, timezone.now()
    version.served_acceptance = served
    version.save()
    if version.parent_id is not None:
        DraftVersion.objects.filter(pk=version.parent_id, status=DraftStatus.RETIRED).update(
            status=DraftStatus.PROMOTED
        )
    audit(
        actor=ACTOR,
        action="draft_rollback",
        pipeline=pipeline,
        before={"draft_version": version.number, "canary_acceptance": version.canary_acceptance},
        after={"served_acceptance": round(served, 4), **version.previous},
        reason=reason
        or (
            f"draft v{version.number}'s acceptance collapsed to {served:.3f} "
            f"(canary {version.canary_acceptance or 0:.3f}): rolled back"
        ),
    )
    previous = version.previous or {}
    kind = previous.get("drafter_kind") or DrafterKind.NGRAM
    pipeline_swap_draft(
        pipeline_id=pipeline.pk,
        actor=ACTOR,
        drafter_kind=kind,
        draft_model=previous.get("draft_model") or "",
        reason=f"draft v{version.number} rolled back",
    )
    return version
