"""Auto mode: applies the recommendation with hysteresis and a minimum interval, audited as
"planner", within the operator's bounds; never flaps."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.audit.models import AuditEvent
from fleet.pipelines.models import Pipeline
from fleet.pipelines.services import pipeline_set_k_policy
from fleet.planner import auto, services

pytestmark = pytest.mark.django_db


def _auto(pipeline, **bounds):
    Pipeline.objects.filter(pk=pipeline.pk).update(
        auto_mode=True, auto_bounds=bounds, k_policy={"mode": "fixed", "k": 0}
    )
    return Pipeline.objects.get(pk=pipeline.pk)


def test_off_does_nothing(pipeline):
    assert not auto.decide(pipeline).applied


def test_applies_then_waits_the_minimum_interval(pipeline, operator):
    p = _auto(pipeline, min_interval_s=600)
    first = auto.decide(p)
    assert first.applied, first.why
    event = AuditEvent.objects.get()
    assert event.actor is None and event.actor_label == "planner" and "modeled" in event.reason
    # an operator puts the old policy back: inside the interval the planner leaves it alone
    p = Pipeline.objects.get(pk=pipeline.pk)
    pipeline_set_k_policy(pipeline_id=p.pk, actor=operator, k_policy={"mode": "fixed", "k": 0})
    p = Pipeline.objects.get(pk=pipeline.pk)
    second = auto.decide(p)
    assert not second.applied and "s ago" in second.why
    later = auto.decide(p, now=timezone.now() + timedelta(seconds=601))
    assert later.applied


def test_no_flapping_on_repeated_runs(pipeline):
    p = _auto(pipeline, min_interval_s=0)
    results = []
    for _ in range(5):
        p = Pipeline.objects.get(pk=pipeline.pk)
        results.append(auto.decide(p).applied)
    assert results[0] and not any(results[1:])
    assert AuditEvent.objects.filter(actor_label="planner").count() == 1


def test_hysteresis_band_blocks_small_gains(pipeline):
    p = _auto(pipeline, min_interval_s=0, hysteresis=10.0)  # demand +1000%
    d = auto.decide(p)
    assert not d.applied and "hysteresis" in d.why


def test_respects_operator_bounds(pipeline):
    p = _auto(pipeline, min_interval_s=0, k_min=1, k_max=2)
    d = auto.decide(p)
    assert d.applied
    policy = Pipeline.objects.get(pk=pipeline.pk).k_policy
    ks = [policy["k"]] if policy["mode"] == "fixed" else [k for _, k in policy["table"]]
    assert all(1 <= k <= 2 for k in ks)


def test_run_auto_mode_and_task(pipeline):
    _auto(pipeline, min_interval_s=0)
    from fleet.planner.tasks import planner_auto_mode

    assert planner_auto_mode() == 1
    assert planner_auto_mode() == 0


def test_recommendation_preview_apply(pipeline, operator):
    rec = services.recommendation(pipeline=pipeline)
    assert rec["available"] is True and rec["modeled"]
    assert rec["sources"]["verify_step"] == "roofline"
    assert rec["current"]["prediction"]["goodput_tps"] > 0
    pv = services.preview(
        pipeline=pipeline, action={"action": "set_k_policy", "k_policy": {"mode": "fixed", "k": 0}}
    )
    assert pv["after"] is not None and pv["before"] is not None
    assert pv["after"]["k"] == 0 and pv["before"]["k"] == 4 and pv["modeled"]
    extra = pipeline.placements.get(role="verify").node
    pv = services.preview(pipeline=pipeline, action={"action": "remove_node", "node": extra.pk})
    assert pv["after"] is None  # no verifier left: nothing to predict
    result = services.apply(pipeline=pipeline, what="k_policy", actor=operator, expected_version=1)
    assert result["applied"] == "k_policy"
    assert AuditEvent.objects.get().actor == operator


def test_split_only_when_the_operator_allows_it(operator):
    from fleet.pipelines.models import Placement
    from tests.factories import make_pipeline, online_node, place

    p = make_pipeline(name="gpus", k_policy={"mode": "fixed", "k": 0})
    place(p, online_node(name="g-v"), "verify")
    for i in range(3):  # GPU drafters that could verify: too many for one verifier
        place(p, online_node(name=f"g-d{i}"), "draft")
    rec = services.recommendation(pipeline=p)
    assert rec["available"] is True
    assert rec["split"]["changes"] and rec["split"]["n_verifiers"] > 1
    Pipeline.objects.filter(pk=p.pk).update(
        auto_mode=True, auto_bounds={"min_interval_s": 0}, k_policy=rec["k_policy"]["k_policy"]
    )
    p = Pipeline.objects.get(pk=p.pk)
    assert not auto.decide(p).applied  # k policy already right, split not allowed
    Pipeline.objects.filter(pk=p.pk).update(auto_bounds={"min_interval_s": 0, "allow_split": True})
    p = Pipeline.objects.get(pk=p.pk)
    d = auto.decide(p)
    assert d.applied and "verifiers" in d.why
    assert (
        Placement.objects.filter(pipeline=p, role="verify").count() == rec["split"]["n_verifiers"]
    )
    assert set(AuditEvent.objects.filter(pipeline=p).values_list("actor_label", flat=True)) == {
        "planner"
    }
