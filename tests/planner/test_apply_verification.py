"""A planner you can hold to its word: a change predicted to gain < 3 % is not recommended,
each recommendation carries an uncertainty, every Apply is measured afterwards (predicted vs
measured on an audit event, so on the chart markers) and rolled back, audited with the
reason, when the measured goodput fell more than 10 % below the previous configuration's;
a hardware profile without bandwidth or FLOPs is refused and an old one cannot 500 the
planner."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from fleet.audit.models import AuditEvent
from fleet.nodes.models import HardwareProfile
from fleet.pipelines.models import Pipeline
from fleet.planner import services, verification
from fleet.planner.models import ApplyCheck
from fleet.planner.recommend import predict_policy
from fleet.telemetry.models import Rollup

pytestmark = pytest.mark.django_db


def seed_goodput(pipeline, *, start, seconds: int, tokens_per_s: float) -> None:
    """Loaded 10 s buckets of the pipeline (and its verifiers) from `start` on."""
    verifiers = list(pipeline.placements.filter(role="verify").values_list("node_id", flat=True))
    for i in range(seconds // 10):
        at = start + timedelta(seconds=10 * i)
        Rollup.objects.create(
            scope="pipeline",
            scope_id=pipeline.pk,
            resolution_s=10,
            start=at,
            data={"tokens_per_s": tokens_per_s, "batch_mean": 8, "acceptance_rate": 0.5},
        )
        for v in verifiers:
            Rollup.objects.create(
                scope="node",
                scope_id=v,
                resolution_s=10,
                start=at,
                data={"batch_mean": 8, "running": 8, "batch_hist": {"8": 100}},
            )


def _bad_k(pipeline) -> Pipeline:
    """A pipeline whose k policy is far from the planner's best (k = 0 at alpha 0.8)."""
    Pipeline.objects.filter(pk=pipeline.pk).update(
        k_policy={"mode": "fixed", "k": 0}, auto_bounds={"alpha_hint": 0.8}
    )
    return Pipeline.objects.get(pk=pipeline.pk)


def test_apply_is_verified_and_rolled_back_when_it_loses(pipeline, operator):
    p = _bad_k(pipeline)
    now = timezone.now()
    seed_goodput(p, start=now - timedelta(seconds=120), seconds=120, tokens_per_s=1000.0)
    out = services.apply(pipeline=p, what="k_policy", actor=operator)
    check = ApplyCheck.objects.get()
    assert check.baseline_goodput_tps == pytest.approx(1000.0)
    assert (check.predicted_goodput_tps or 0) > 0 and check.previous == {
        "k_policy": {"mode": "fixed", "k": 0}
    }
    # nothing measured after the change yet: not judged
    assert verification.run_checks() == []
    seed_goodput(p, start=check.applied_at, seconds=30, tokens_per_s=500.0)
    done = verification.run_checks(now=check.applied_at + timedelta(seconds=31))
    assert [c.pk for c in done] == [check.pk]
    check.refresh_from_db()
    assert check.state == "rolled_back" and check.measured_goodput_tps == pytest.approx(500.0)
    p.refresh_from_db()
    assert p.k_policy == {"mode": "fixed", "k": 0}  # the previous policy is back
    rollback = AuditEvent.objects.filter(action="set_k_policy").first()
    assert rollback is not None
    assert rollback.actor_label == "planner" and "automatic rollback" in rollback.reason
    assert "measured 500.0" in rollback.reason and "-50 %" in rollback.reason
    verified = AuditEvent.objects.get(action="apply_verified")
    assert verified.after["measured_goodput_tps"] == pytest.approx(500.0)
    assert verified.before["predicted_goodput_tps"] == pytest.approx(
        out and check.predicted_goodput_tps
    )
    # the markers on the pipeline's charts carry the verdict
    assert AuditEvent.objects.filter(pipeline=p).count() == 3  # apply, rollback, verified
    c = Client()
    c.force_login(operator)
    html = c.get(f"/planner/pipelines/{p.pk}/").content.decode()
    table = html.split('id="apply-checks"')[1].split("</table>")[0]
    assert "Rolled Back" in table and "500.0" in table and "1000.0" in table


def test_apply_that_holds_is_kept_with_predicted_vs_measured(pipeline, operator):
    p = _bad_k(pipeline)
    now = timezone.now()
    seed_goodput(p, start=now - timedelta(seconds=60), seconds=60, tokens_per_s=1000.0)
    services.apply(pipeline=p, what="k_policy", actor=operator)
    check = ApplyCheck.objects.get()
    seed_goodput(p, start=check.applied_at, seconds=30, tokens_per_s=950.0)  # -5 %: kept
    verification.run_checks(now=check.applied_at + timedelta(seconds=31))
    check.refresh_from_db()
    assert check.state == "held" and "predicted" in check.verdict
    p.refresh_from_db()
    assert p.k_policy != {"mode": "fixed", "k": 0}
    assert AuditEvent.objects.filter(action="apply_verified").count() == 1


def test_no_traffic_after_an_apply_is_inconclusive_not_a_rollback(pipeline, operator):
    p = _bad_k(pipeline)
    services.apply(pipeline=p, what="k_policy", actor=operator)
    check = ApplyCheck.objects.get()
    verification.run_checks(now=check.applied_at + timedelta(minutes=6))
    check.refresh_from_db()
    assert check.state == "inconclusive"


def test_a_change_predicted_to_gain_under_3_percent_is_not_recommended(pipeline, operator):
    rec: Any = services.recommendation(pipeline=pipeline)
    best = rec["k_policy"]["k_policy"]
    # once the recommended policy is in place, nothing is recommended (and Apply refuses)
    Pipeline.objects.filter(pk=pipeline.pk).update(k_policy=best)
    rec = services.recommendation(pipeline=Pipeline.objects.get(pk=pipeline.pk))
    assert rec["k_policy"]["changes"] is False
    assert rec["uncertainty_pct"] > 0 and rec["min_gain_pct"] == 3.0
    with pytest.raises(Exception, match="best predicted|not worth"):
        services.apply(
            pipeline=Pipeline.objects.get(pk=pipeline.pk), what="k_policy", actor=operator
        )


def test_never_recommends_a_change_predicted_to_lose(pipeline):
    for k in range(0, 9):
        Pipeline.objects.filter(pk=pipeline.pk).update(k_policy={"mode": "fixed", "k": k})
        p = Pipeline.objects.get(pk=pipeline.pk)
        rec: Any = services.recommendation(pipeline=p)
        for key in ("k_policy", "split"):
            if rec[key]["changes"]:
                assert rec[key]["difference"]["goodput_pct"] >= 3.0, (k, key, rec[key])
        ctx = services.context(pipeline=p)
        pred = predict_policy(ctx.model, rec["k_policy"]["k_policy"], 8).goodput_tps
        assert pred >= predict_policy(ctx.model, p.k_policy, 8).goodput_tps * 0.999


def test_zero_bandwidth_profile_is_refused_at_write_time(admin):
    api = APIClient()
    api.force_authenticate(admin)
    base = {
        "slug": "broken",
        "kind": "gpu",
        "vendor": "x",
        "model": "y",
        "memory_gb": 80,
        "memory_bandwidth_gbs": 0,
        "peak_bf16_tflops": 100,
        "tdp_w": 700,
        "idle_w": 100,
    }
    r = api.post("/api/v1/profiles", base, format="json")
    assert r.status_code == 400 and "memory_bandwidth_gbs" in str(r.json()), r.json()
    r = api.post(
        "/api/v1/profiles",
        {**base, "memory_bandwidth_gbs": 3000, "peak_bf16_tflops": 0},
        format="json",
    )
    assert r.status_code == 400 and "peak_bf16_tflops" in str(r.json())


def test_an_old_bad_profile_row_cannot_500_the_planner(pipeline, viewer, operator):
    HardwareProfile.objects.filter(slug="h100-sxm").update(memory_bandwidth_gbs=0)
    rec: Any = services.recommendation(pipeline=pipeline)
    assert rec["available"] is False and "memory_bandwidth_gbs" in rec["reason"]
    c = Client()
    c.force_login(viewer)
    assert c.get(f"/planner/pipelines/{pipeline.pk}/").status_code == 200
    assert c.get("/planner/").status_code == 200
    assert c.get("/planner/what-if?run=1&add_verifiers=1").status_code == 200
    api = APIClient()
    api.force_authenticate(operator)
    for method, url, body in (
        ("get", f"/api/v1/planner/pipelines/{pipeline.pk}/recommendation", None),
        (
            "post",
            f"/api/v1/planner/pipelines/{pipeline.pk}/preview",
            {"action": "split", "n_verifiers": 1, "n_drafters": 1},
        ),
        ("post", f"/api/v1/planner/pipelines/{pipeline.pk}/apply", {"what": "k_policy"}),
        ("post", "/api/v1/planner/what-if", {"add_verifiers": 1}),
    ):
        r = getattr(api, method)(url, body, format="json") if body else api.get(url)
        assert r.status_code < 500, (url, r.status_code)


def test_an_operators_k_change_is_verified_and_rolled_back_too(
    pipeline, operator, django_capture_on_commit_callbacks
):
    """Apply k = 0 at high acceptance through the API: measured, found losing, rolled back."""
    now = timezone.now()
    seed_goodput(pipeline, start=now - timedelta(seconds=60), seconds=60, tokens_per_s=800.0)
    api = APIClient()
    api.force_authenticate(operator)
    with django_capture_on_commit_callbacks(execute=True):
        r = api.post(
            f"/api/v1/pipelines/{pipeline.pk}/k-policy",
            {"k_policy": {"mode": "fixed", "k": 0}},
            format="json",
        )
    assert r.status_code == 200, r.content
    check = ApplyCheck.objects.get()
    assert check.previous == {"k_policy": {"mode": "fixed", "k": 4}}
    seed_goodput(pipeline, start=check.applied_at, seconds=20, tokens_per_s=300.0)
    verification.run_checks(now=check.applied_at + timedelta(seconds=21))
    pipeline.refresh_from_db()
    assert pipeline.k_policy == {"mode": "fixed", "k": 4}
    assert AuditEvent.objects.filter(reason__startswith="automatic rollback").count() == 1
