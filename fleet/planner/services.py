"""The planner applied to pipelines: recommendations beside the current configuration,
previews of proposed actions, and `apply` (recorded like any operator action).

Every figure here is modeled; answers carry `"modeled": True` and the sources of their
inputs (measured telemetry or the hardware roofline). The answers are JSON objects served as
they are by the API, so their shapes are TypedDicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from django.core.exceptions import ValidationError

from fleet.audit.models import AuditEvent
from fleet.pipelines import services as pipeline_services
from fleet.pipelines.models import DrafterKind, Pipeline, Placement, PlacementRole
from fleet.pipelines.policy import PolicyError, validate_policy
from fleet.pipelines.services import allowed_roles
from fleet.planner import measurements, verification
from fleet.planner.model import PipelineModel, Prediction, predict
from fleet.planner.recommend import (
    best_split,
    difference,
    k_table,
    policy_from_table,
    predict_policy,
)


@dataclass(frozen=True)
class PlannerContext:
    """What the planner models a pipeline from: its model (measured curves or the roofline),
    the measured inputs behind it, and the placements it was built from."""

    model: PipelineModel
    measured: dict[str, Any]
    placements: list[Placement]


class Unavailable(TypedDict):
    pipeline: int
    available: Literal[False]
    modeled: bool
    reason: str


class Recommendation(TypedDict):
    """Current configuration beside the planner's k policy and drafter:verifier split; the
    predictions are `Prediction.as_dict()` figures."""

    pipeline: int
    version: int
    available: Literal[True]
    modeled: bool
    sources: dict[str, Any]
    inputs: dict[str, Any]
    current: dict[str, Any]
    k_policy: dict[str, Any]
    split: dict[str, Any]
    # measured at the k the pipeline ran lately (measurements.measured_row), with the
    # prediction at that same k and batch and its error; None when nothing ran lately
    measured: dict[str, Any] | None
    uncertainty_pct: float  # how far off the prediction may be (model error + unmeasured)
    min_gain_pct: float  # a change predicted to gain less is not recommended


class Preview(TypedDict):
    pipeline: int
    action: dict[str, Any]
    modeled: bool
    sources: dict[str, Any]
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    difference: dict[str, Any] | None


class SwitchedNode(TypedDict):
    node: int
    role: str


class AppliedKPolicy(TypedDict):
    applied: Literal["k_policy"]
    k_policy: dict[str, Any]


class AppliedSplit(TypedDict):
    applied: Literal["split"]
    switched: list[SwitchedNode]


def _placements(pipeline: Pipeline) -> list[Placement]:
    return list(pipeline.placements.select_related("node__profile").exclude(node__state="retired"))


def operating_batch(pipeline: Pipeline, measured: dict) -> int:
    b = measured.get("batch_mean")
    if b:
        return max(1, min(int(round(b)), pipeline.max_verify_batch))
    return pipeline.max_verify_batch


def _bounds(pipeline: Pipeline) -> tuple[int, int]:
    bounds = pipeline.auto_bounds or {}
    return int(bounds.get("k_min", 0)), int(bounds.get("k_max", 8))


def _flexible(placements: list[Placement]) -> tuple[list[int], list[int]]:
    """(drafters that could verify, verifiers that could draft), node ids."""
    drafters = [
        p.node_id
        for p in placements
        if p.role == PlacementRole.DRAFT and PlacementRole.VERIFY in allowed_roles(p.node)
    ]
    verifiers = [
        p.node_id
        for p in placements
        if p.role == PlacementRole.VERIFY and PlacementRole.DRAFT in allowed_roles(p.node)
    ]
    return drafters, verifiers


def context(*, pipeline: Pipeline) -> PlannerContext:
    placements = _placements(pipeline)
    measured = measurements.measured(pipeline)
    return PlannerContext(
        model=measurements.pipeline_model(
            pipeline, placements=placements, measured_inputs=measured
        ),
        measured=measured,
        placements=placements,
    )


def recommendation(*, pipeline: Pipeline) -> Recommendation | Unavailable:
    """Current configuration vs the planner's: k table and drafter:verifier split. Never
    raises on what the model cannot use (a hardware profile without bandwidth or FLOPs, a
    model without the hardware to run it on): that is an unavailable recommendation."""
    try:
        return _recommendation(pipeline)
    except ValueError as exc:  # UnusableProfile, or a model with nothing to time a step by
        return Unavailable(
            pipeline=pipeline.pk,
            available=False,
            modeled=True,
            reason=f"cannot model this pipeline: {exc}",
        )


def _recommendation(pipeline: Pipeline) -> Recommendation | Unavailable:
    ctx = context(pipeline=pipeline)
    m, measured, placements = ctx.model, ctx.measured, ctx.placements
    if m.n_verifiers == 0 or m.verifier is None and m.verify_curve is None:
        return {
            "pipeline": pipeline.pk,
            "available": False,
            "modeled": True,
            "reason": "the pipeline has no verifier placed: nothing to model",
        }
    batch = operating_batch(pipeline, measured)
    k_min, k_max = _bounds(pipeline)
    slos = {"itl_slo_ms": pipeline.slo_itl_p99_ms, "ttft_slo_ms": pipeline.slo_ttft_p99_ms}
    current = predict_policy(m, pipeline.k_policy, batch)
    table = k_table(m, pipeline.max_verify_batch, k_min=k_min, k_max=k_max, **slos)
    policy = policy_from_table(table)
    recommended = predict_policy(m, policy, batch)
    flex_d, flex_v = _flexible(placements)
    beside = measured_beside(pipeline, m)
    uncertainty = uncertainty_pct(m, beside)
    split, candidates = best_split(
        m,
        batch=batch,
        flexible_drafters=len(flex_d),
        flexible_verifiers=len(flex_v),
        power_budget_w=pipeline.power_budget_w,
        k_max=k_max,
        needs_drafter=pipeline.drafter_kind == DrafterKind.MODEL,
        **slos,
    )
    return {
        "pipeline": pipeline.pk,
        "version": pipeline.version,
        "measured": beside,
        "available": True,
        "modeled": True,
        "sources": measurements.sources_label(m, measured),
        "inputs": {
            "alpha": m.alpha,
            "per_position": list(m.per_position),
            "batch": batch,
            "n_verifiers": m.n_verifiers,
            "n_drafters": m.n_drafters,
            "verifier": m.verifier.slug if m.verifier else None,
            "drafter": m.drafter.slug if m.drafter else None,
            "telemetry_buckets": measured.get("samples", 0),
        },
        "current": {"k_policy": pipeline.k_policy, "prediction": current.as_dict()},
        "uncertainty_pct": uncertainty,
        "min_gain_pct": MIN_GAIN_PCT,
        "k_policy": {
            "k_policy": policy,
            "prediction": recommended.as_dict(),
            "difference": difference(current, recommended),
            **worth_it(
                current,
                recommended,
                validate_policy(pipeline.k_policy) != validate_policy(policy),
                uncertainty,
            ),
        },
        "split": {
            "n_verifiers": split.n_verifiers,
            "n_drafters": split.n_drafters,
            "within_power_budget": split.within_budget,
            "prediction": split.prediction.as_dict(),
            "difference": difference(current, split.prediction),
            **worth_it(
                current,
                split.prediction,
                (split.n_verifiers, split.n_drafters) != (m.n_verifiers, m.n_drafters),
                uncertainty,
            ),
            "candidates": [
                {
                    "n_verifiers": s.n_verifiers,
                    "n_drafters": s.n_drafters,
                    "within_power_budget": s.within_budget,
                    "goodput_tps": round(s.prediction.goodput_tps, 3),
                    "k": s.prediction.k,
                    "power_w": round(s.prediction.power_w, 1),
                }
                for s in candidates
            ],
        },
    }


MIN_GAIN_PCT = 3.0  # a change predicted to gain less is not recommended


def uncertainty_pct(m: PipelineModel, beside: dict | None) -> float:
    """How far the prediction may be off, in %: the model's error where it was measured
    (at the current configuration), plus a margin for each input that is not measured
    (acceptance assumed, step costs from the roofline rather than the nodes)."""
    err = abs(beside["goodput_error_pct"]) if beside and beside["goodput_error_pct"] else 0.0
    sources = measurements.sources_label(m)
    margin = sum(
        {"roofline": 10.0, "calibrated roofline": 5.0}.get(sources[key], 0.0)
        for key in ("verify_step", "draft_step")
    ) + (10.0 if sources["alpha"] == "assumed" else 0.0)
    return round(min(err + margin + 2.0, 100.0), 1)


def worth_it(before: Prediction, after: Prediction, changes: bool, uncertainty: float) -> dict:
    """Whether a different configuration is recommended: only when it is predicted to gain
    at least MIN_GAIN_PCT (a change predicted to lose, or to gain within the noise, is
    not), with the reason either way."""
    gain = difference(before, after)["goodput_pct"] or 0.0
    if not changes:
        return {"changes": False, "why": "the current configuration is the best predicted"}
    if gain < MIN_GAIN_PCT:
        return {
            "changes": False,
            "why": f"predicted gain {gain:+.1f} % is below {MIN_GAIN_PCT:.0f} %: not worth it",
        }
    return {
        "changes": True,
        "why": f"predicted gain {gain:+.1f} % (± {uncertainty:.0f} %)",
    }


def measured_beside(pipeline: Pipeline, m: PipelineModel) -> dict[str, Any] | None:
    """The measured row at the pipeline's recent k and batch, and the prediction for that same
    k and batch (not the operating batch of the hour), so the two can be compared."""
    row = measurements.measured_row(pipeline)
    if row is None or not row["batch"]:
        return None
    batch = max(1.0, row["batch"])
    prediction = predict(m, k=row["k"], batch=batch).as_dict()
    goodput = row["goodput_tps"]
    error = (prediction["goodput_tps"] - goodput) / goodput * 100 if goodput else None
    return {
        **row,
        "prediction": prediction,
        "goodput_error_pct": round(error, 1) if error is not None else None,
    }


PREVIEW_ACTIONS = ("set_k_policy", "set_batch_caps", "place", "remove_node", "change_role", "split")


def preview(*, pipeline: Pipeline, action: dict[str, Any]) -> Preview:
    """What the planner predicts before and after a proposed action (nothing is changed)."""
    kind = action.get("action")
    if kind not in PREVIEW_ACTIONS:
        raise ValidationError({"action": f"one of {', '.join(PREVIEW_ACTIONS)}"})
    try:
        ctx = context(pipeline=pipeline)
    except ValueError as exc:
        raise ValidationError({"action": f"cannot model this pipeline: {exc}"}) from exc
    m, measured, placements = ctx.model, ctx.measured, ctx.placements
    batch = operating_batch(pipeline, measured)
    policy = pipeline.k_policy
    after_m, after_policy, after_batch = m, policy, batch
    if kind == "set_k_policy":
        try:
            after_policy = validate_policy(action.get("k_policy"))
        except PolicyError as exc:
            raise ValidationError({"k_policy": str(exc)}) from exc
    elif kind == "set_batch_caps":
        cap = action.get("max_verify_batch")
        if not isinstance(cap, int) or not 1 <= cap <= 1024:
            raise ValidationError({"max_verify_batch": "an integer in 1..1024"})
        after_batch = min(batch, cap) if measured.get("batch_mean") else cap
    elif kind in ("place", "remove_node", "change_role"):
        after_m = _after_node_change(m, pipeline, placements, action, kind)
    elif kind == "split":
        try:
            v, d = int(action["n_verifiers"]), int(action["n_drafters"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationError({"n_verifiers": "give n_verifiers and n_drafters"}) from exc
        after_m = m.with_(n_verifiers=v, n_drafters=d)
    if m.n_verifiers == 0 and after_m.n_verifiers == 0:
        raise ValidationError(
            {"action": "the pipeline has no verifier before or after: nothing to model"}
        )
    try:
        before = predict_policy(m, policy, batch) if m.n_verifiers else None
        after = predict_policy(after_m, after_policy, after_batch) if after_m.n_verifiers else None
    except ValueError as exc:
        raise ValidationError({"action": f"cannot model this pipeline: {exc}"}) from exc
    return {
        "pipeline": pipeline.pk,
        "action": action,
        "modeled": True,
        "sources": measurements.sources_label(m, measured),
        "before": before.as_dict() if before else None,
        "after": after.as_dict() if after else None,
        "difference": difference(before, after) if before and after else None,
    }


def _after_node_change(m: PipelineModel, pipeline, placements, action, kind) -> PipelineModel:
    from fleet.nodes.models import Node

    try:
        node = Node.objects.select_related("profile").get(pk=int(action.get("node")))
    except (TypeError, ValueError, Node.DoesNotExist) as exc:
        raise ValidationError({"node": "no such node"}) from exc
    placed = next((p for p in placements if p.node_id == node.pk), None)
    v, d = m.n_verifiers, m.n_drafters
    if placed is not None:  # it leaves its current role first
        v, d = (v - 1, d) if placed.role == PlacementRole.VERIFY else (v, d - 1)
    role = placed.role if (kind == "remove_node" and placed) else action.get("role")
    if kind in ("place", "change_role"):
        if role not in PlacementRole.values:
            raise ValidationError({"role": "draft or verify"})
        v, d = (v + 1, d) if role == PlacementRole.VERIFY else (v, d + 1)
    return m.with_(n_verifiers=max(v, 0), n_drafters=max(d, 0))


def apply(
    *,
    pipeline: Pipeline,
    what: str,
    actor,
    expected_version: int | None = None,
    reason: str = "",
) -> AppliedKPolicy | AppliedSplit:
    """Apply the current recommendation (`what`: "k_policy" or "split") through the same
    audited, version-checked services as any operator action."""
    rec = recommendation(pipeline=pipeline)
    if rec["available"] is False:
        raise ValidationError({"what": rec["reason"]})
    why = reason
    if not why:
        proposal = rec["split"] if what == "split" else rec["k_policy"]
        goodput_pct = proposal["difference"]["goodput_pct"]
        why = f"planner recommendation ({what}), predicted goodput {goodput_pct}%"
    if what == "k_policy":
        if not rec["k_policy"]["changes"]:
            raise ValidationError({"what": rec["k_policy"]["why"]})
        previous = {"k_policy": pipeline.k_policy}
        pipeline_services.pipeline_set_k_policy(
            pipeline_id=pipeline.pk,
            actor=actor,
            k_policy=rec["k_policy"]["k_policy"],
            expected_version=expected_version,
            reason=why,
        )
        verification.open_check(
            pipeline=pipeline,
            event=AuditEvent.objects.filter(pipeline=pipeline).first(),  # the one just written
            what="k_policy",
            previous=previous,
            predicted_tps=rec["k_policy"]["prediction"]["goodput_tps"],
        )
        return {"applied": "k_policy", "k_policy": rec["k_policy"]["k_policy"]}
    if what == "split":
        split = rec["split"]
        if not split["changes"]:
            raise ValidationError({"what": split["why"]})
        placements = _placements(pipeline)
        flex_d, flex_v = _flexible(placements)
        delta = split["n_verifiers"] - rec["inputs"]["n_verifiers"]
        switch = (
            [(n, PlacementRole.VERIFY) for n in flex_d[:delta]]
            if delta > 0
            else [(n, PlacementRole.DRAFT) for n in flex_v[:-delta]]
        )
        version = expected_version
        for node_id, role in switch:
            pipeline_services.node_place(
                pipeline_id=pipeline.pk,
                node_id=node_id,
                role=role,
                actor=actor,
                expected_version=version,
                reason=why,
            )
            version = None  # our own changes bump the version; the first check is enough
        switched = [SwitchedNode(node=n, role=r) for n, r in switch]
        back = PlacementRole.DRAFT if delta > 0 else PlacementRole.VERIFY
        verification.open_check(
            pipeline=pipeline,
            event=None,
            what="split",
            previous={"roles": [[n, back] for n, _ in switch]},
            predicted_tps=split["prediction"]["goodput_tps"],
        )
        return {"applied": "split", "switched": switched}
    raise ValidationError({"what": "k_policy or split"})
