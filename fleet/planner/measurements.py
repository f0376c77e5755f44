"""What the planner knows about a pipeline: hardware of its placed nodes, model sizes, and
the measured alpha and step-time curves from telemetry rollups (roofline where unmeasured).

Step times are forward passes only; a round on the serving path also spends time between
them (the drafts and tokens crossing Redis, batch gathering, sampling, bookkeeping). That
time is measured too: a verifier's round period is its 10 s bucket over its verify steps
(scaled by the share of the bucket it had sequences to run), and what the forward passes
do not explain is fitted as the pipeline's per-round overhead t(tokens scored, batch).
With it, a prediction for the pipeline's current configuration is the serving path's, not
the engine's alone. `measured_row` is what was measured at one k and batch, to show beside
the prediction.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from fleet.nodes.models import HardwareProfile
from fleet.pipelines.compat import resolve_model_dir
from fleet.pipelines.models import Pipeline, Placement, PlacementRole
from fleet.planner.model import (
    Curve,
    Hardware,
    ModelSpec,
    PipelineModel,
    fit_linear,
    fit_linear2,
)
from fleet.planner.node_costs import node_step_costs
from fleet.telemetry.models import Rollup

DEFAULT_ALPHA = 0.7
MEASURE_WINDOW = timedelta(hours=1)
MEASURED_ROW_WINDOW = timedelta(minutes=15)
MIN_FIT_POINTS = 3
ROLLUP_S = 10
# a verifier bucket counts as a round measurement when it had sequences this share of it
MIN_LOADED = 0.5


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


# (role, profile slug, retired) -> how many placed nodes: what the model needs of placements
RoleCounts = Counter


def role_counts(placements: list[Placement]) -> tuple[RoleCounts, dict[str, HardwareProfile]]:
    """The placements as counts, and the profiles they name (by slug)."""
    counts: RoleCounts = Counter()
    profiles: dict[str, HardwareProfile] = {}
    for p in placements:
        profile = p.node.profile
        profiles.setdefault(profile.slug, profile)
        counts[(p.role, profile.slug, p.node.state == "retired")] += 1
    return counts, profiles


def _majority_profile(counts: RoleCounts, profiles: dict[str, HardwareProfile], role: str):
    by_slug: Counter = Counter()
    for (r, slug, _retired), n in counts.items():
        if r == role:
            by_slug[slug] += n
    if not by_slug:
        return None
    slug, _ = by_slug.most_common(1)[0]
    return profiles[slug]


def measured(pipeline: Pipeline, *, window: timedelta = MEASURE_WINDOW) -> dict:
    """Alpha, per-position acceptance, (n, seconds) step points from the pipeline's 10 s
    rollups of the last `window`, and the round periods of its verifiers (their node
    rollups). Empty when nothing was measured."""
    since = timezone.now() - window
    rows = list(
        Rollup.objects.filter(
            scope="pipeline", scope_id=pipeline.pk, resolution_s=ROLLUP_S, start__gte=since
        ).values_list("data", flat=True)[:2000]
    )
    out = measured_from_rollups(rows, default_k=_policy_k(pipeline))
    node_rows = Rollup.objects.filter(
        scope="node", scope_id__in=_verifier_ids(pipeline), resolution_s=ROLLUP_S, start__gte=since
    ).values_list("data", flat=True)[:4000]
    rounds = round_points(list(node_rows))
    if rounds:
        out["rounds"] = rounds
    placed = Placement.objects.filter(pipeline=pipeline).exclude(node__state="retired")
    out |= node_step_costs(
        list(placed.filter(role=PlacementRole.VERIFY).values_list("node_id", flat=True)[:8]),
        list(placed.filter(role=PlacementRole.DRAFT).values_list("node_id", flat=True)[:8]),
    )
    return out


def mean_draft_length(d: dict, default_k: float) -> float:
    """Draft tokens per draft in a bucket: (mean acceptance length - 1) / acceptance rate."""
    rate, mal = d.get("acceptance_rate"), d.get("mean_acceptance_length")
    return (mal - 1) / rate if (rate and mal) else default_k


def _verifier_ids(pipeline: Pipeline):
    """The pipeline's verifiers, as a subquery (not thousands of ids sent back in an IN)."""
    return Placement.objects.filter(pipeline=pipeline, role=PlacementRole.VERIFY).values("node_id")


def _loaded_share(d: dict) -> float:
    """The share of a verifier's bucket it had sequences to run: running / batch, at most 1."""
    batch = d.get("batch_mean")
    return min((d.get("running") or 0.0) / batch, 1.0) if batch else 0.0


def _loaded_starts(pipeline: Pipeline, since) -> set:
    """Bucket starts at which the pipeline's verifiers were loaded (on average)."""
    shares: dict = {}
    for start, d in Rollup.objects.filter(
        scope="node", scope_id__in=_verifier_ids(pipeline), resolution_s=ROLLUP_S, start__gte=since
    ).values_list("start", "data")[:4000]:
        shares.setdefault(start, []).append(_loaded_share(d))
    return {start for start, s in shares.items() if sum(s) / len(s) >= MIN_LOADED}


def round_points(node_rows: list[dict]) -> list[tuple[float, float, float, float]]:
    """(k, batch, round seconds, verify steps) per loaded verifier bucket: the bucket's length
    times the share of it the verifier had sequences for (running / batch, at most 1), over
    its verify steps. Everything a round costs on the serving path is in it. The steps are
    the point's weight: the weighted mean round is then total loaded time / total rounds,
    the one that gives the measured throughput (a plain mean of rounds of unequal buckets
    would not: throughput goes as 1 / round)."""
    out = []
    for d in node_rows:
        steps = sum((d.get("batch_hist") or {}).values())
        batch = d.get("batch_mean")
        if not steps or not batch:
            continue
        loaded = _loaded_share(d)
        if loaded < MIN_LOADED:
            continue
        out.append((mean_draft_length(d, 0.0), float(batch), ROLLUP_S * loaded / steps, steps))
    return out


def fit_overhead(m: PipelineModel, rounds: list[tuple]) -> Curve | None:
    """The per-round time the forward passes of `m` do not explain, t(tokens scored, batch),
    fitted to measured round periods (None without any), each weighted by its rounds."""
    points = []
    for k, batch, round_s, *weight in rounds:
        forward = _forward_round_s(m, k, batch)
        points.append((batch * (k + 1), batch, max(round_s - forward, 0.0), *weight))
    if not points:
        return None
    if _narrow([p[0] for p in points]) and _narrow([p[1] for p in points]):
        # one operating point: how the overhead splits between per-round, per-token and
        # per-sequence costs is not measured; a constant per round is the neutral guess
        # (a slope fitted to noise would favour or penalise larger k for no reason)
        weights = [p[3] if len(p) > 3 else 1.0 for p in points]
        mean = sum(w * p[2] for w, p in zip(weights, points, strict=True)) / sum(weights)
        return Curve(mean, 0.0)
    return fit_linear2(points)


def _narrow(values: list[float], spread: float = 0.1) -> bool:
    """All within +-spread of their mean."""
    mean = sum(values) / len(values)
    return all(abs(v - mean) <= spread * abs(mean) for v in values)


def _forward_round_s(m: PipelineModel, k: float, batch: float) -> float:
    """predict()'s round without overhead, at a fractional mean k and batch."""
    V, D = max(m.n_verifiers, 1), m.n_drafters
    draft_batch = batch * V / D if (D > 0 and m.drafter_kind == "model") else batch
    return m.draft_round_s(draft_batch, k) + m.t_verify(batch, batch * (k + 1)) + m.rest_s(batch, k)


def measured_row(
    pipeline: Pipeline, *, k: int | None = None, window: timedelta = MEASURED_ROW_WINDOW
) -> dict | None:
    """What the pipeline's telemetry measured at draft length `k` (default: the most recent
    bucket's) in the last `window`: goodput, power, ITL, batch, averaged over the buckets
    that ran at that k under load (its verifiers had sequences at least MIN_LOADED of the
    bucket: a bucket where traffic started or stopped is not the configuration's
    throughput). None when there are none."""
    since = timezone.now() - window
    rows = list(
        Rollup.objects.filter(
            scope="pipeline", scope_id=pipeline.pk, resolution_s=ROLLUP_S, start__gte=since
        )
        .order_by("-start")
        .values_list("start", "data")[:200]
    )
    loaded = _loaded_starts(pipeline, since)
    busy = [
        d
        for start, d in rows
        if (d.get("tokens_per_s") or 0) > 0 and d.get("batch_mean") and start in loaded
    ]
    if not busy:
        return None
    if k is None:
        k = round(mean_draft_length(busy[0], _policy_k(pipeline)))
    at_k = [d for d in busy if round(mean_draft_length(d, _policy_k(pipeline))) == k]
    if not at_k:
        return None

    def mean(key: str) -> float | None:
        values = [float(d[key]) for d in at_k if d.get(key) is not None]
        return sum(values) / len(values) if values else None

    goodput, power = mean("tokens_per_s"), mean("power_w")
    sources = {d.get("power_source") for d in at_k} - {None}
    return {
        "k": k,
        "batch": mean("batch_mean"),
        "goodput_tps": goodput,
        "power_w": power,
        "power_source": sources.pop() if len(sources) == 1 else "mixed",
        "tokens_per_j": goodput / power if (goodput and power) else None,
        "itl_ms": mean("itl_mean_ms"),
        "itl_p99_ms": mean("itl_p99_ms"),
        "mean_acceptance_length": mean("mean_acceptance_length"),
        "buckets": len(at_k),
        "window_s": int(window.total_seconds()),
        "measured": True,
    }


def loaded_goodput(pipeline: Pipeline, *, since, until) -> tuple[float, int] | None:
    """Mean goodput (tokens/s) of the pipeline's 10 s buckets that lie wholly in
    [since, until] and ran under load, and how many there were; None without any."""
    rows = Rollup.objects.filter(
        scope="pipeline",
        scope_id=pipeline.pk,
        resolution_s=ROLLUP_S,
        start__gte=since,
        start__lte=until - timedelta(seconds=ROLLUP_S),
    ).values_list("start", "data")[:500]
    loaded = _loaded_starts(pipeline, since)
    values = [
        float(d["tokens_per_s"])
        for start, d in rows
        if start in loaded and (d.get("tokens_per_s") or 0) > 0 and d.get("batch_mean")
    ]
    return (sum(values) / len(values), len(values)) if values else None


def _policy_k(pipeline: Pipeline) -> int:
    policy = pipeline.k_policy or {}
    return int(policy.get("k", 4)) if policy.get("mode") != "table" else int(policy["table"][0][1])


def measured_from_rollups(rows: list[dict], *, default_k: int = 4) -> dict:
    alphas, per_pos_rows, verify_pts, draft_pts, batches = [], [], [], [], []
    for d in rows:
        if d.get("alpha") is not None:
            alphas.append(float(d["alpha"]))
        # per sequence-round asked (a drafter without a proposal counted), where the bucket
        # has the drafter's rounds; else vLLM's per draft made
        per_pos = d.get("per_position_asked") or d.get("per_position_acceptance")
        if per_pos:
            per_pos_rows.append(per_pos)
        batch = d.get("batch_mean")
        if batch:
            batches.append(float(batch))
        k = mean_draft_length(d, default_k)
        if batch and d.get("verify_step_ms"):
            verify_pts.append((batch * (k + 1), d["verify_step_ms"] / 1000, 1.0, batch))
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
    if verify_pts and not _spans([p[0] for p in verify_pts]):
        # one operating point: a line through it would take its slope from noise (and once
        # predicted k = 0 at +135 % when it halved goodput). The roofline's shape, scaled to
        # what was measured, carries the point to other k and batches instead.
        out["verify_points"] = [(n, b, t) for n, t, _, b in verify_pts]
    elif len(verify_pts) >= MIN_FIT_POINTS:
        out["verify_curve"] = fit_linear([p[:3] for p in verify_pts])
    if len(draft_pts) >= MIN_FIT_POINTS:
        # one size only: a measured constant beats the roofline at the size that runs
        out["draft_curve"] = fit_linear(draft_pts)
    return out


def _spans(values: list[float], ratio: float = 1.5) -> bool:
    """Whether the measured sizes span enough (max/min) to fit a slope to."""
    return min(values) > 0 and max(values) / min(values) >= ratio


def verify_scale(model: PipelineModel, points: list[tuple[float, float, float]]) -> float:
    """Measured over roofline step time at the measured (tokens, batch) points."""
    roof = sum(model.t_verify(b, n) for n, b, _ in points)
    return sum(t for *_, t in points) / roof if roof > 0 else 1.0


def pipeline_model(
    pipeline: Pipeline,
    *,
    placements: list[Placement] | None = None,
    measured_inputs: dict | None = None,
) -> PipelineModel:
    """The planner's model of `pipeline` as placed now, with measured inputs where any."""
    if placements is None:
        placements = list(pipeline.placements.select_related("node__profile"))
    counts, profiles = role_counts(placements)
    return pipeline_model_of_counts(
        pipeline, counts=counts, profiles=profiles, measured_inputs=measured_inputs
    )


def pipeline_model_of_counts(
    pipeline: Pipeline,
    *,
    counts: RoleCounts,
    profiles: dict[str, HardwareProfile],
    measured_inputs: dict | None = None,
) -> PipelineModel:
    """`pipeline_model` from placement counts (`role_counts`, or a GROUP BY of a large
    fleet's placements): the same model without loading a row per node."""
    m = measured(pipeline) if measured_inputs is None else measured_inputs
    v_profile = _majority_profile(counts, profiles, PlacementRole.VERIFY)
    d_profile = _majority_profile(counts, profiles, PlacementRole.DRAFT)

    def serving(role: str) -> int:
        return sum(n for (r, _slug, retired), n in counts.items() if r == role and not retired)

    model = PipelineModel(
        alpha=m.get("alpha", pipeline_alpha_hint(pipeline)),
        per_position=tuple(m.get("per_position", ())),
        verifier=Hardware.from_profile(v_profile) if v_profile else None,
        drafter=Hardware.from_profile(d_profile) if d_profile else None,
        target=model_spec(pipeline.target_model, default_params=8e9),
        draft=model_spec(pipeline.draft_model, default_params=1e9),
        verify_curve=m.get("verify_curve"),
        draft_curve=m.get("draft_curve"),
        verify_costs=m.get("verify_costs"),
        draft_costs=m.get("draft_costs"),
        calibration=m.get("calibration"),
        n_verifiers=serving(PlacementRole.VERIFY),
        n_drafters=serving(PlacementRole.DRAFT),
        drafter_kind=pipeline.drafter_kind,
        drafter_mix=_mix(counts, profiles, PlacementRole.DRAFT),
    )
    if m.get("verify_points") and model.verifier is not None and model.target is not None:
        model = model.with_(verify_scale=verify_scale(model, m["verify_points"]))
    if m.get("rounds") and model.n_verifiers:
        model = model.with_(overhead_curve=fit_overhead(model, m["rounds"]))
    return model


def _mix(counts: RoleCounts, profiles: dict[str, HardwareProfile], role: str) -> tuple:
    by_slug: Counter = Counter()
    for (r, slug, retired), n in counts.items():
        if r == role and not retired:
            by_slug[slug] += n
    return tuple((Hardware.from_profile(profiles[slug]), n) for slug, n in by_slug.items())


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
        "verify_step": "measured by the nodes"
        if m.verify_costs is not None
        else ("calibrated roofline" if m.verify_scale != 1.0 else src(m.verify_curve)),
        "draft_step": "measured by the nodes" if m.draft_costs is not None else src(m.draft_curve),
        "overhead": "measured" if m.overhead_curve is not None else "none",
        "calibration": (
            f"measured by the drafter ({len(m.calibration)} batch and k cells)"
            if m.calibration
            else "none"
        ),
    }
