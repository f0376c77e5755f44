"""Auto mode: the planner applies its own k-policy recommendation to pipelines whose
operators turned it on, within the operators' bounds, with hysteresis and a minimum interval
so it never flaps. Each change is an audited action by "planner".

Bounds (`pipeline.auto_bounds`, all optional):
    k_min, k_max          the k range the planner may choose from (default 0..8)
    min_interval_s        at least this long between two planner changes (default 300)
    hysteresis            minimum predicted goodput gain to act, as a fraction (default 0.05)
    allow_split           also switch flexible nodes between drafting and verifying
                          (default false: the k policy only)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.utils import timezone

from fleet.accounts.errors import Conflict
from fleet.audit.models import AuditEvent
from fleet.pipelines.models import Pipeline
from fleet.pipelines.services import PLANNER, pipeline_set_k_policy
from fleet.planner import services, verification
from fleet.planner.models import ApplyCheck

logger = logging.getLogger(__name__)

DEFAULT_MIN_INTERVAL_S = 300
DEFAULT_HYSTERESIS = 0.05


@dataclass(frozen=True)
class Decision:
    pipeline: int
    applied: bool
    why: str
    k_policy: dict | None = None


def last_planner_change(pipeline: Pipeline) -> datetime | None:
    return (
        AuditEvent.objects.filter(pipeline=pipeline, actor_label=PLANNER, actor__isnull=True)
        .exclude(action="apply_verified")
        .order_by("-created_at")
        .values_list("created_at", flat=True)
        .first()
    )


def decide(pipeline: Pipeline, *, now: datetime | None = None) -> Decision:
    """Apply the recommended k policy if auto mode is on, the minimum interval has passed
    and the predicted gain clears the hysteresis band."""
    now = now or timezone.now()
    if not pipeline.auto_mode:
        return Decision(pipeline.pk, False, "auto mode is off")
    bounds = pipeline.auto_bounds or {}
    interval = float(bounds.get("min_interval_s", DEFAULT_MIN_INTERVAL_S))
    band = float(bounds.get("hysteresis", DEFAULT_HYSTERESIS))
    last = last_planner_change(pipeline)
    if last is not None and now - last < timedelta(seconds=interval):
        return Decision(
            pipeline.pk,
            False,
            f"last change {int((now - last).total_seconds())} s ago (< {interval:.0f} s)",
        )
    rec = services.recommendation(pipeline=pipeline)
    if rec["available"] is False:
        return Decision(pipeline.pk, False, rec["reason"])
    decision = _try_k_policy(pipeline, rec, band)
    if decision.applied or not bounds.get("allow_split"):
        return decision
    split = _try_split(pipeline, rec, band)
    return split if split.applied else decision


def _try_k_policy(pipeline: Pipeline, rec: services.Recommendation, band: float) -> Decision:
    proposal = rec["k_policy"]
    if not proposal["changes"]:
        return Decision(pipeline.pk, False, "the current k policy is the recommended one")
    gain = (proposal["difference"]["goodput_pct"] or 0.0) / 100
    if gain < band:
        return Decision(
            pipeline.pk,
            False,
            f"predicted gain {gain:.1%} is inside the hysteresis band ({band:.0%})",
        )
    reason = (
        f"auto mode: predicted goodput {rec['current']['prediction']['goodput_tps']:.1f} -> "
        f"{proposal['prediction']['goodput_tps']:.1f} tokens/s (+{gain:.1%}, modeled)"
    )
    if rolled_back_recently(pipeline, proposal["k_policy"]):
        return Decision(pipeline.pk, False, "this k policy was rolled back after it lost")
    try:
        pipeline_set_k_policy(
            pipeline_id=pipeline.pk,
            actor=PLANNER,
            k_policy=proposal["k_policy"],
            expected_version=pipeline.version,
            reason=reason,
        )
    except Conflict as exc:  # an operator changed it meanwhile: their change wins this round
        return Decision(pipeline.pk, False, f"skipped: {exc.detail}")
    verification.open_check(  # the same guard as an operator's Apply
        pipeline=pipeline,
        event=AuditEvent.objects.filter(pipeline=pipeline).first(),
        what="k_policy",
        previous={"k_policy": pipeline.k_policy},
        predicted_tps=proposal["prediction"]["goodput_tps"],
    )
    return Decision(pipeline.pk, True, reason, proposal["k_policy"])


def rolled_back_recently(pipeline: Pipeline, k_policy: dict) -> bool:
    """Auto mode does not re-apply what it had to roll back within the last hour (it would
    flap between a prediction and a measurement that disagree)."""
    since = timezone.now() - timedelta(hours=1)
    return any(
        c.event is not None and (c.event.after or {}).get("k_policy") == k_policy
        for c in ApplyCheck.objects.filter(
            pipeline=pipeline, state=ApplyCheck.State.ROLLED_BACK, applied_at__gte=since
        ).select_related("event")
    )


def _try_split(pipeline: Pipeline, rec: services.Recommendation, band: float) -> Decision:
    """Switch flexible nodes between drafting and verifying (only with `allow_split` in the
    bounds: it moves nodes, so the operator opts in)."""
    split = rec["split"]
    gain = (split["difference"]["goodput_pct"] or 0.0) / 100
    if not split["changes"] or not split["within_power_budget"] or gain < band:
        return Decision(pipeline.pk, False, "no drafter:verifier change clears the band")
    reason = (
        f"auto mode: {split['n_verifiers']} verifiers : {split['n_drafters']} drafters, "
        f"predicted goodput +{gain:.1%} (modeled)"
    )
    try:
        services.apply(
            pipeline=pipeline,
            what="split",
            actor=PLANNER,
            expected_version=pipeline.version,
            reason=reason,
        )
    except (Conflict, ValidationError) as exc:
        return Decision(pipeline.pk, False, f"skipped: {exc}")
    return Decision(pipeline.pk, True, reason)


def run_auto_mode(*, now: datetime | None = None) -> list[Decision]:
    """One pass over every pipeline in auto mode (the control worker runs this periodically)."""
    decisions = []
    for pipeline in Pipeline.objects.filter(auto_mode=True):
        try:
            decisions.append(decide(pipeline, now=now))
        except Exception:  # one bad pipeline must not stop the others
            logger.exception("planner: auto mode failed for pipeline %s", pipeline.pk)
    for d in decisions:
        if d.applied:
            logger.info("planner: pipeline %s: %s", d.pipeline, d.why)
    return decisions
