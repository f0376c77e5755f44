"""Every Apply is verified (Argo Rollouts' analysis run, for k and placements): after the
planner changes a pipeline -- an operator's Apply or auto mode -- Tandem measures the
pipeline's goodput for a window, writes predicted vs measured on an audit event (and so on
the charts' markers), and rolls the change back, audited with the reason, when the measured
goodput fell more than ROLLBACK_DROP below the previous configuration's.

Measured goodput is the pipeline's 10 s rollups under load (`measurements.loaded_goodput`):
the baseline from the minute before the change (not before the change before it), the
outcome from the buckets that start after it. With no traffic before, there is no baseline:
the check records predicted vs measured and keeps the change. With no traffic after within
MAX_WAIT, it is inconclusive.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from fleet.accounts.errors import Conflict
from fleet.audit.models import AuditEvent
from fleet.audit.services import audit
from fleet.pipelines import services as pipeline_services
from fleet.pipelines.models import Pipeline
from fleet.pipelines.services import PLANNER
from fleet.planner import measurements
from fleet.planner.models import ApplyCheck

logger = logging.getLogger(__name__)

ROLLBACK_DROP = 0.10  # measured more than 10 % below the previous configuration: roll back
BASELINE_WINDOW = timedelta(seconds=60)  # and never before the change before this one
MIN_BUCKETS = 2  # loaded 10 s buckets after the change before judging it
MAX_WAIT = timedelta(minutes=5)


def open_check(
    *, pipeline: Pipeline, event, what: str, previous: dict, predicted_tps: float | None
) -> ApplyCheck:
    now = timezone.now()
    since = now - BASELINE_WINDOW
    before = AuditEvent.objects.filter(pipeline=pipeline, created_at__lt=now)
    if event is not None:
        before = before.exclude(pk=event.pk)
    last_change = before.order_by("-created_at").values_list("created_at", flat=True).first()
    if last_change is not None and last_change > since:
        since = last_change  # the previous configuration's own buckets, not an older one's
    baseline = measurements.loaded_goodput(pipeline, since=since, until=now)
    return ApplyCheck.objects.create(
        pipeline=pipeline,
        event=event,
        what=what,
        previous=previous,
        predicted_goodput_tps=predicted_tps,
        baseline_goodput_tps=baseline[0] if baseline else None,
        applied_at=now,
    )


def run_checks(*, now: datetime | None = None) -> list[ApplyCheck]:
    """Judge every pending check that has enough measurements (or has waited too long)."""
    now = now or timezone.now()
    done = []
    for check in ApplyCheck.objects.filter(state=ApplyCheck.State.PENDING).select_related(
        "pipeline"
    ):
        if _judge(check, now):
            done.append(check)
    return done


def _judge(check: ApplyCheck, now: datetime) -> bool:
    after = measurements.loaded_goodput(check.pipeline, since=check.applied_at, until=now)
    if after is None or after[1] < MIN_BUCKETS:
        if now - check.applied_at < MAX_WAIT:
            return False
        return _close(check, ApplyCheck.State.INCONCLUSIVE, None, "no traffic to measure")
    measured, _buckets = after
    predicted, base = check.predicted_goodput_tps, check.baseline_goodput_tps
    text = f"predicted {_tps(predicted)}, measured {_tps(measured)} tokens/s"
    if predicted:
        text += f" ({(measured - predicted) / predicted * 100:+.0f} % vs predicted)"
    if base:
        change = (measured - base) / base
        text += f"; before {_tps(base)} tokens/s ({change * 100:+.0f} %)"
        if change < -ROLLBACK_DROP:
            return _rollback(check, measured, text)
    return _close(check, ApplyCheck.State.HELD, measured, text + ": kept")


def _tps(value: float | None) -> str:
    return "?" if value is None else f"{value:,.1f}"


@transaction.atomic
def _close(check: ApplyCheck, state: str, measured: float | None, verdict: str) -> bool:
    check.state, check.measured_goodput_tps, check.verdict = state, measured, verdict
    check.checked_at = timezone.now()
    check.save(update_fields=["state", "measured_goodput_tps", "verdict", "checked_at"])
    audit(
        actor=PLANNER,
        action="apply_verified",
        pipeline=check.pipeline,
        before={
            "predicted_goodput_tps": check.predicted_goodput_tps,
            "baseline_goodput_tps": check.baseline_goodput_tps,
        },
        after={"measured_goodput_tps": measured, "outcome": state},
        reason=f"{check.what} apply verified: {verdict}",
    )
    return True


def _rollback(check: ApplyCheck, measured: float, text: str) -> bool:
    reason = f"automatic rollback of the {check.what} change: {text}"
    try:
        with transaction.atomic():
            if check.what == "k_policy":
                pipeline_services.pipeline_set_k_policy(
                    pipeline_id=check.pipeline_id,
                    actor=PLANNER,
                    k_policy=check.previous["k_policy"],
                    reason=reason,
                )
            else:
                for node_id, role in check.previous.get("roles", []):
                    pipeline_services.node_place(
                        pipeline_id=check.pipeline_id,
                        node_id=node_id,
                        role=role,
                        actor=PLANNER,
                        reason=reason,
                    )
            _close(check, ApplyCheck.State.ROLLED_BACK, measured, text + ": rolled back")
    except Conflict as exc:  # the pipeline changed meanwhile: that change stands
        logger.warning("rollback of check %s skipped: %s", check.pk, exc)
        return _close(check, ApplyCheck.State.HELD, measured, f"{text}; not rolled back: {exc}")
    return True
