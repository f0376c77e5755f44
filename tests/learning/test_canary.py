"""A draft version's life: trained (audited, queued on `train`), canaried, promoted or
rejected on paired acceptance and goodput, rolled back when a promoted one collapses; each
step an audit event (a chart marker). A failed or lost training changes nothing served."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from fleet.audit.models import AuditEvent
from fleet.console.selectors import change_markers
from fleet.pipelines.models import Pipeline
from inference.learning import canary, job, services
from inference.learning.models import DraftStatus, DraftVersion
from inference.learning.selectors import canary_of, measured_arms
from inference.learning.tick import tick
from inference.services import worker_config
from tests.learning.conftest import finished


@pytest.fixture
def queued(monkeypatch):
    sent = []
    monkeypatch.setattr(services, "_enqueue", lambda pk: sent.append(pk))
    return sent


@pytest.fixture
def candidate(learning, operator, queued, django_capture_on_commit_callbacks):
    services.learning_configure(
        pipeline_id=learning.pk,
        actor=operator,
        changes={"enabled": True, "min_canary_tokens": 500, "canary_fraction": 0.2},
    )
    with django_capture_on_commit_callbacks(execute=True):
        v = services.training_start(pipeline_id=learning.pk, actor=operator)
    assert queued == [v.pk] and v.path == "learned/smollm2-v1" and v.status == "training"
    services.training_finished(
        version_id=v.pk,
        manifest={"heldout_agreement_before": 0.4, "heldout_agreement": 0.5, "train_pairs": 40},
    )
    v.refresh_from_db()
    return v


def actions(pipeline):
    return list(
        AuditEvent.objects.filter(pipeline=pipeline).order_by("id").values_list("action", flat=True)
    )


def traffic(pipeline, *, canary_rate, serving_rate, n=12, canary_s=1.0):
    """Sequences started after the canary began, in both arms."""
    at = timezone.now() + timedelta(seconds=3)
    for _ in range(n):
        c = int(100 * canary_rate)
        finished(pipeline, arm="canary", drafted=100, accepted=c, seconds=canary_s, at=at)
        finished(pipeline, arm="serving", drafted=100, accepted=int(100 * serving_rate), at=at)


def test_a_candidate_is_canaried_with_the_configuration(candidate, learning, pushed):
    assert actions(learning)[-2:] == ["draft_train", "draft_canary"]
    assert pushed[-1] == learning.pk
    spec = {"version": 1, "draft_model": "learned/smollm2-v1", "fraction": 0.2}
    assert canary_of(learning) == spec and worker_config(learning)["canary"] == spec
    with pytest.raises(ValidationError, match="candidate"):  # one at a time
        services.training_start(pipeline_id=learning.pk, actor="learning")


def test_better_by_the_margin_it_is_promoted_through_the_audited_swap(candidate, learning):
    traffic(learning, canary_rate=0.6, serving_rate=0.4)
    assert canary.evaluate(candidate) == "promote"
    candidate.refresh_from_db()
    learning.refresh_from_db()
    assert candidate.status == DraftStatus.PROMOTED
    assert candidate.canary_acceptance == pytest.approx(0.6)
    assert candidate.baseline_acceptance == pytest.approx(0.4)
    assert candidate.previous == {"drafter_kind": "model", "draft_model": "smol-draft"}
    assert learning.draft_model == "learned/smollm2-v1" and learning.drafter_kind == "model"
    assert actions(learning)[-2:] == ["draft_promote", "swap_draft"]
    promote = AuditEvent.objects.get(pipeline=learning, action="draft_promote")
    assert promote.actor_label == "learning" and promote.after["draft_version"] == 1
    assert canary_of(learning) is None  # the canary is over
    markers = change_markers("pipeline", learning, since=timezone.now() - timedelta(minutes=5))
    assert {"draft_train", "draft_canary", "draft_promote", "swap_draft"} <= {
        m["action"] for m in markers
    }


def test_not_better_by_the_margin_or_slower_it_is_rejected(candidate, learning):
    traffic(learning, canary_rate=0.41, serving_rate=0.4)
    assert canary.evaluate(candidate) == "reject"
    candidate.refresh_from_db()
    assert candidate.status == DraftStatus.REJECTED
    assert Pipeline.objects.get(pk=learning.pk).draft_model == "smol-draft"
    assert actions(learning)[-1] == "draft_reject"
    assert canary_of(learning) is None


def test_better_acceptance_but_lower_goodput_is_rejected(candidate, learning):
    traffic(learning, canary_rate=0.7, serving_rate=0.4, canary_s=2.0)  # half the tokens/s
    assert canary.evaluate(candidate) == "reject"


def test_not_enough_measured_decides_nothing_yet(candidate, learning):
    traffic(learning, canary_rate=0.9, serving_rate=0.1, n=2)
    assert canary.evaluate(candidate) is None
    candidate.refresh_from_db()
    assert candidate.status == DraftStatus.CANDIDATE
    late = timezone.now() + canary.CANARY_MAX + timedelta(minutes=1)
    assert canary.evaluate(candidate, now=late) == "reject"  # inconclusive, at last


def test_a_promoted_draft_whose_acceptance_collapses_is_rolled_back(candidate, learning):
    traffic(learning, canary_rate=0.6, serving_rate=0.4)
    canary.evaluate(candidate)
    candidate.refresh_from_db()
    promoted_at = candidate.decided_at
    # healthy after promotion: kept
    later = promoted_at + timedelta(seconds=30)
    for _ in range(6):
        finished(learning, drafted=100, accepted=58, at=later)
    assert canary.watch(candidate, now=later + timedelta(seconds=1)) is False
    # a reload with a broken draft: acceptance collapses -> rolled back to what it replaced
    broken = promoted_at + canary.WATCH_WINDOW + timedelta(minutes=1)
    for _ in range(6):
        finished(learning, drafted=100, accepted=5, at=broken)
    assert canary.watch(candidate, now=broken + timedelta(seconds=1)) is True
    candidate.refresh_from_db()
    learning.refresh_from_db()
    assert candidate.status == DraftStatus.ROLLED_BACK
    assert candidate.served_acceptance == pytest.approx(0.05)
    assert (learning.drafter_kind, learning.draft_model) == ("model", "smol-draft")
    assert actions(learning)[-2:] == ["draft_rollback", "swap_draft"]
    event = AuditEvent.objects.get(pipeline=learning, action="draft_rollback")
    assert event.actor_label == "learning" and "collapsed" in event.reason


def test_a_failed_training_changes_nothing_served(learning, operator, queued, monkeypatch):
    services.learning_configure(pipeline_id=learning.pk, actor=operator, changes={"enabled": True})
    v = services.training_start(pipeline_id=learning.pk, actor=operator)
    version_before = Pipeline.objects.get(pk=learning.pk).version

    def boom(*a, **k):
        raise RuntimeError("out of memory")

    monkeypatch.setattr("inference.training.online.distil_on_pairs", boom)
    job.run(v.pk)
    v.refresh_from_db()
    after = Pipeline.objects.get(pk=learning.pk)
    assert v.status == DraftStatus.FAILED and "out of memory" in v.detail["error"]
    assert (after.version, after.draft_model) == (version_before, "smol-draft")
    assert actions(learning)[-1] == "draft_failed" and canary_of(learning) is None
    services.training_start(pipeline_id=learning.pk, actor=operator)  # the next may start


def test_a_killed_training_is_declared_lost_and_changes_nothing_served(learning, operator, queued):
    services.learning_configure(
        pipeline_id=learning.pk, actor=operator, changes={"enabled": True, "train_minutes": 1}
    )
    v = services.training_start(pipeline_id=learning.pk, actor=operator)
    assert services.training_lost(now=timezone.now() + timedelta(minutes=5)) == 0
    assert services.training_lost(now=timezone.now() + timedelta(minutes=13)) == 1
    v.refresh_from_db()
    assert v.status == DraftStatus.FAILED
    assert Pipeline.objects.get(pk=learning.pk).draft_model == "smol-draft"
    # the killed task's late finish is ignored
    assert services.training_finished(version_id=v.pk, manifest={}) is None


def test_the_tick_starts_a_training_when_enough_pairs_came(learning, operator, queued):
    services.learning_configure(
        pipeline_id=learning.pk, actor=operator, changes={"enabled": True, "min_pairs": 3}
    )
    soon = timezone.now() + timedelta(seconds=1)
    for _ in range(3):
        finished(learning, at=soon)
    report = tick(now=soon + timedelta(seconds=5))
    assert report["captured"] == 3 and report["started"] == [("smollm2", 1)]
    assert DraftVersion.objects.get(pipeline=learning).status == DraftStatus.TRAINING
    assert tick(now=soon + timedelta(seconds=6))["started"] == []  # one at a time


def test_arms_are_split_by_id_like_the_drafter_does(learning):
    since = timezone.now() - timedelta(minutes=1)
    finished(learning, arm="canary", accepted=90)
    finished(learning, arm="serving", accepted=10)
    serving, canary_arm = measured_arms(learning, since=since, fraction=0.2)
    assert (serving.acceptance, canary_arm.acceptance) == (0.1, 0.9)
    assert serving.goodput_tps == pytest.approx(20.0)
