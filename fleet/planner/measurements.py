"""What the planner knows about a pipeline: hardware of its placed nodes, model sizes, and
the measured alpha and step-time curves from telemetry rollups (roofline where unmeasured)."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from fleet.pipelines.compat import resolve_model_dir
from fleet.pipelines.models import Pipeline, Placement, PlacementRole
from fleet.planner.model import Curve, Hardware, ModelSpec, PipelineModel, fit_linear
from fleet.telemetry.models import Rollup

DEFAULT_ALPHA = 0.7
MEASURE_WINDOW = timedelta(hours=1)
MIN_FIT_POINTS = 3


def model_spec(ref: str, *, default_params: float) -> ModelSpec:
    """From the model directory's config.json when present here, else from the name
    ("llama-3.1-8b" -> 8e9 parameters), else `default_params`."""
    if not ref:
        return ModelSpec(name="", params=default_params)
    try:
        cfg = json.loads((resolve_model_dir(ref) / "config.json").read_text())
        return spec_from_config(ref, cfg)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    match = re.search(r"(\d+(?:\.\d+)?)\s*([bBmM])(?![a-zA-Z])", Path(ref).name)
    if match:
        scale = 1e9 if match.group(2).lower() == "b" else 1e6
        params = float(match.group(1)) * scale
        return ModelSpec(name=ref, params=params, **_shape_for(params))
    return ModelSpec(name=ref, params=default_params, **_shape_for(default_params))


def _shape_for(params: float) -> dict:
    """Typical Llama shapes by size (layers, KV width) for the KV term of the roofline."""
    if params >= 50e9:
        return {"n_layers": 80, "kv_dim": 1024}
    if params >= 5e9:
        return {"n_layers": 32, "kv_dim": 1024}
    if params >= 1e9:
        return {"n_layers": 16, "kv_dim": 512}
    return {"n_layers": 12, "kv_dim": 256}


def spec_from_config(name: str, cfg: dict) -> ModelSpec:
    h = int(cfg["hidden_size"])
    n_layers = int(cfg["num_hidden_layers"])
    inter = int(cfg.get("intermediate_size", 4 * h))
    heads = int(cfg.get("num_attention_heads", 1))
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or h // heads)
    vocab = int(cfg.get("vocab_size", 32000))
    attn = h * heads * head_dim * 2 + h * kv_heads * head_dim * 2
    params = n_layers * (attn + 3 * h * inter) + vocab * h * (
        1 if cfg.get("tie_word_embeddings") else 2
    )
    dtype = str(cfg.get("torch_dtype", "bfloat16"))
    bpp = 4.0 if "32" in dtype else 2.0
    return ModelSpec(
        name=name,
        params=float(params),
        n_layers=n_layers,
        kv_dim=kv_heads * head_dim,
        bytes_per_param=bpp,
    )


def _majority_profile(placements: list[Placement], role: str):
    profiles = [p.node.profile for p in placements if p.role == role]
    if not profiles:
        return None
    slug, _ = Counter(p.slug for p in profiles).most_common(1)[0]
    return next(p for p in profiles if p.slug == slug)


def measured(pipeline: Pipeline, *, window: timedelta = MEASURE_WINDOW) -> dict:
    """Alpha, per-position acceptance and (n, seconds) step points from the pipeline's 10 s
    rollups of the last `window`. Empty when nothing was measured."""
    rows = list(
        Rollup.objects.filter(
            scope="pipeline",
            scope_id=pipeline.pk,
            resolution_s=10,
            start__gte=timezone.now() - window,
        ).values_list("data", flat=True)[:2000]
    )
    return measured_from_rollups(rows, default_k=_policy_k(pipeline))


def _policy_k(pipeline: Pipeline) -> int:
    policy = pipeline.k_policy or {}
    return int(policy.get("k", 4)) if policy.get("mode") != "table" else int(policy["table"][0][1])


def measured_from_rollups(rows: list[dict], *, default_k: int = 4) -> dict:
    alphas, per_pos_rows, verify_pts, draft_pts, batches = [], [], [], [], []
    for d in rows:
        if d.get("alpha") is not None:
            alphas.append(float(d["alpha"]))
        if d.get("per_position_acceptance"):
            per_pos_rows.append(d["per_position_acceptance"])
        batch = d.get("batch_mean")
        if batch:
            batches.append(float(batch))
        k = default_k
        rate, mal = d.get("acceptance_rate"), d.get("mean_acceptance_length")
        if rate and mal:
            k = (mal - 1) / rate
        if batch and d.get("verify_step_ms"):
            verify_pts.append((batch * (k + 1), d["verify_step_ms"] / 1000))
        if batch and d.get("draft_step_ms"):
            draft_pts.append((batch, d["draft_step_ms"] / 1000))
    out: dict = {"samples": len(rows)}
    if batches:
        out["batch_mean"] = sum(batches) / len(batches)
    if alphas:  # each row's alpha is derive()'s: only the positions its drafts had
        out["alpha"] = sum(alphas) / len(alphas)
    if per_pos_rows:
        # position i from the buckets whose drafts had it (after k is lowered, the newer
        # buckets are shorter: they say nothing about the positions they lack)
        width = max(len(r) for r in per_pos_rows)
        out["per_position"] = tuple(
            sum(have := [r[i] for r in per_pos_rows if len(r) > i]) / len(have)
            for i in range(width)
        )
    for key, pts in (("verify_curve", verify_pts), ("draft_curve", draft_pts)):
        if len(pts) >= MIN_FIT_POINTS and len({round(n, 1) for n, _ in pts}) >= 2:
            out[key] = fit_linear(pts)
    return out


def pipeline_model(
    pipeline: Pipeline,
    *,
    placements: list[Placement] | None = None,
    measured_inputs: dict | None = None,
) -> PipelineModel:
    """The planner's model of `pipeline` as placed now, with measured inputs where any."""
    if placements is None:
        placements = list(pipeline.placements.select_related("node__profile"))
    m = measured(pipeline) if measured_inputs is None else measured_inputs
    v_profile = _majority_profile(placements, PlacementRole.VERIFY)
    d_profile = _majority_profile(placements, PlacementRole.DRAFT)
    return PipelineModel(
        alpha=m.get("alpha", pipeline_alpha_hint(pipeline)),
        per_position=tuple(m.get("per_position", ())),
        verifier=Hardware.from_profile(v_profile) if v_profile else None,
        drafter=Hardware.from_profile(d_profile) if d_profile else None,
        target=model_spec(pipeline.target_model, default_params=8e9),
        draft=model_spec(pipeline.draft_model, default_params=1e9),
        verify_curve=m.get("verify_curve"),
        draft_curve=m.get("draft_curve"),
        n_verifiers=sum(
            1 for p in placements if p.role == PlacementRole.VERIFY and p.node.state != "retired"
        ),
        n_drafters=sum(
            1 for p in placements if p.role == PlacementRole.DRAFT and p.node.state != "retired"
        ),
        drafter_kind=pipeline.drafter_kind,
        drafter_mix=_mix(placements, PlacementRole.DRAFT),
    )


def _mix(placements: list[Placement], role: str) -> tuple:
    counts = Counter(
        p.node.profile.slug for p in placements if p.role == role and p.node.state != "retired"
    )
    profiles = {p.node.profile.slug: p.node.profile for p in placements}
    return tuple((Hardware.from_profile(profiles[slug]), n) for slug, n in counts.items())


def pipeline_alpha_hint(pipeline: Pipeline) -> float:
    """Alpha before anything is measured: the simulator's configured alpha, else 0.7."""
    bounds = pipeline.auto_bounds or {}
    try:
        return float(bounds.get("alpha_hint", DEFAULT_ALPHA))
    except (TypeError, ValueError):
        return DEFAULT_ALPHA


def sources_label(m: PipelineModel, measured_inputs: dict | None = None) -> dict:
    def src(curve: Curve | None) -> str:
        return curve.source if curve else "roofline"

    got = measured_inputs or {}
    return {
        "alpha": "measured" if ("alpha" in got or m.per_position) else "assumed",
        "verify_step": src(m.verify_curve),
        "draft_step": src(m.draft_curve),
    }
