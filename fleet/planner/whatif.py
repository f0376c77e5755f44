"""What-if: the current fleet with a changed mix, predicted before and after (modeled).

Changes (all optional, applied in this order):
    move_to_verify: N       N GPU drafters become verifiers (in the pipelines that have them)
    move_to_draft: N        N GPU verifiers become drafters (never a pipeline's last verifier)
    add_drafters: M, add_drafter_profile: slug      M new drafters, spread over pipelines
    add_verifiers: M, add_verifier_profile: slug    M new verifiers, spread over pipelines
    prices: {slug: usd_per_hour}                    prices for profiles that have none

"Before" is today's fleet: each pipeline modeled at its operating batch with the k policy it
runs now, beside what its telemetry measured at that k ("measured", where it has traffic).
"After" is the new mix under the same policies (an adaptive one finds its best k for the mix
itself), so the difference is the change's alone, modeled against modeled: neither the
model's own error nor a k re-optimisation counts as its gain. Drafter/verifier hardware is
the most common profile of each role. Fleet figures: tokens/s (sum), tokens/J (tokens/s over
watts) and $ per million tokens (hourly prices of every node over tokens per hour).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db.models import Count

from fleet.nodes.choices import ProfileKind
from fleet.nodes.models import HardwareProfile
from fleet.pipelines.models import DrafterKind, Pipeline, Placement, PlacementRole
from fleet.planner import measurements
from fleet.planner.model import (
    Hardware,
    PipelineModel,
    UnusableProfile,
    cost_per_million_tokens,
)
from fleet.planner.recommend import best_k_at, predict_policy
from fleet.planner.services import operating_batch


@dataclass
class PipelineMix:
    pipeline_id: int
    name: str
    simulated: bool
    model: PipelineModel
    batch: int
    k_max: int
    verifiers: Counter = field(default_factory=Counter)  # profile slug -> count
    drafters: Counter = field(default_factory=Counter)
    gpu_drafters: int = 0  # drafters on GPUs (may verify)
    k_policy: dict | None = None  # the policy it runs today


def _hw(profiles: dict[str, HardwareProfile], counter: Counter) -> Hardware | None:
    if not counter:
        return None
    slug, _ = counter.most_common(1)[0]
    return Hardware.from_profile(profiles[slug])


def current_fleet(
    *, include_simulated: bool = True
) -> tuple[list[PipelineMix], dict[str, HardwareProfile]]:
    """Every pipeline's mix, from one GROUP BY over the placements that are not retired
    (pipeline, role, profile): a 10,000-node fleet is a few dozen rows, not 10,000 loaded
    placements."""
    profiles = {p.slug: p for p in HardwareProfile.objects.all() if usable(p)}
    pipelines = Pipeline.objects.order_by("name")
    if not include_simulated:
        pipelines = pipelines.filter(simulated=False)
    pipelines_list = list(pipelines)
    counts: dict[int, measurements.RoleCounts] = {p.pk: Counter() for p in pipelines_list}
    rows = (
        Placement.objects.filter(pipeline__in=pipelines)
        .exclude(node__state="retired")
        .values("pipeline_id", "role", "node__profile__slug")
        .annotate(n=Count("pk"))
    )
    for row in rows:
        counts[row["pipeline_id"]][(row["role"], row["node__profile__slug"], False)] += row["n"]
    mixes = []
    for pipeline in pipelines_list:
        placed = counts[pipeline.pk]
        if any(slug not in profiles for _, slug, _ in placed):
            continue  # placed on a profile the roofline cannot use: not modeled
        measured = measurements.measured(pipeline)
        m = measurements.pipeline_model_of_counts(
            pipeline, counts=placed, profiles=profiles, measured_inputs=measured
        )
        mix = PipelineMix(
            pipeline.pk,
            pipeline.name,
            pipeline.simulated,
            m,
            operating_batch(pipeline, measured),
            int((pipeline.auto_bounds or {}).get("k_max", 8)),
        )
        mix.k_policy = pipeline.k_policy
        for (role, slug, _retired), n in placed.items():
            (mix.verifiers if role == PlacementRole.VERIFY else mix.drafters)[slug] += n
            if role == PlacementRole.DRAFT and profiles[slug].kind == ProfileKind.GPU:
                mix.gpu_drafters += n
        if pipeline.drafter_kind != DrafterKind.MODEL:
            mix.model = mix.model.with_(drafter_kind=pipeline.drafter_kind)
        mixes.append(mix)
    return mixes, profiles


def evaluate(
    mixes: list[PipelineMix],
    profiles: dict,
    prices: dict[str, float] | None = None,
    *,
    today: bool = False,
) -> dict:
    """Fleet figures for `mixes`: at each pipeline's own k policy (`today`) or at the best k
    for its mix."""
    prices = prices or {}
    rows, total_tps, total_w, total_usd, unpriced = [], 0.0, 0.0, 0.0, set()
    for mix in mixes:
        v, d = sum(mix.verifiers.values()), sum(mix.drafters.values())
        m = mix.model.with_(
            n_verifiers=v,
            n_drafters=d,
            verifier=_hw(profiles, mix.verifiers) or mix.model.verifier,
            drafter=_hw(profiles, mix.drafters) or mix.model.drafter,
            drafter_mix=tuple(
                (Hardware.from_profile(profiles[slug]), n)
                for slug, n in mix.drafters.items()
                if n > 0
            ),
        )
        usd = 0.0
        for slug, n in (mix.verifiers + mix.drafters).items():
            price = prices.get(slug, Hardware.from_profile(profiles[slug]).usd_per_hour)
            if price is None:
                unpriced.add(slug)
            else:
                usd += price * n
        if v == 0 or (m.verifier is None and m.verify_curve is None):
            rows.append(
                {
                    "pipeline": mix.pipeline_id,
                    "name": mix.name,
                    "simulated": mix.simulated,
                    "n_verifiers": v,
                    "n_drafters": d,
                    "goodput_tps": 0.0,
                    "power_w": 0.0,
                    "k": None,
                }
            )
            continue
        p = _at_policy(m, mix) if today else best_k_at(m, mix.batch, k_max=mix.k_max)
        total_tps += p.goodput_tps
        total_w += p.power_w
        total_usd += usd
        rows.append(
            {
                "pipeline": mix.pipeline_id,
                "name": mix.name,
                "simulated": mix.simulated,
                "n_verifiers": v,
                "n_drafters": d,
                "k": p.k,
                "batch": mix.batch,
                "goodput_tps": round(p.goodput_tps, 2),
                "power_w": round(p.power_w, 1),
                "tokens_per_j": round(p.tokens_per_j, 5),
                "itl_ms": round(p.itl_s * 1000, 3),
            }
        )
    usd_per_m = cost_per_million_tokens(total_tps, total_usd) if not unpriced else None
    return {
        "modeled": True,
        "tokens_per_s": round(total_tps, 2),
        "power_w": round(total_w, 1),
        "tokens_per_j": round(total_tps / total_w, 5) if total_w else None,
        "usd_per_hour": round(total_usd, 2),
        "usd_per_million_tokens": round(usd_per_m, 4) if usd_per_m is not None else None,
        "unpriced_profiles": sorted(unpriced),
        "pipelines": rows,
    }


def _at_policy(m: PipelineModel, mix: PipelineMix):
    try:
        return predict_policy(m, mix.k_policy or {}, mix.batch)
    except (ValueError, TypeError):  # no valid policy stored: the planner's choice
        return best_k_at(m, mix.batch, k_max=mix.k_max)


def measured_fleet(mixes: list[PipelineMix]) -> dict:
    """What the telemetry measured for these pipelines at the k they run (the planner's measured
    row: loaded 10 s buckets of the last minutes); pipelines without traffic are counted apart."""
    tps = watts = 0.0
    seen = 0
    pipelines = Pipeline.objects.in_bulk([mix.pipeline_id for mix in mixes])
    for mix in mixes:
        row = measurements.measured_row(pipelines[mix.pipeline_id])
        if row is None or row["goodput_tps"] is None:
            continue
        seen += 1
        tps += row["goodput_tps"]
        watts += row["power_w"] or 0.0
    return {
        "pipelines": seen,
        "of": len(mixes),
        "tokens_per_s": round(tps, 2) if seen else None,
        "power_w": round(watts, 1) if seen else None,
        "tokens_per_j": round(tps / watts, 5) if seen and watts else None,
    }


DELTA_KEYS = ("tokens_per_s", "power_w", "tokens_per_j", "usd_per_hour", "usd_per_million_tokens")


def _spread(mixes: list[PipelineMix], n: int, add) -> None:
    if not mixes:
        return
    for i in range(n):
        add(mixes[i % len(mixes)])


def usable(profile: HardwareProfile) -> bool:
    try:
        Hardware.from_profile(profile)
        return True
    except UnusableProfile:
        return False


def apply_changes(mixes: list[PipelineMix], profiles: dict, changes: dict) -> list[str]:
    """Mutates `mixes`; returns notes on what could not be done."""
    notes = []
    gpu_slugs = {s for s, p in profiles.items() if p.kind == ProfileKind.GPU}
    want = int(changes.get("move_to_verify") or 0)
    for mix in mixes:
        while want > 0 and mix.gpu_drafters > 0:
            slug = next(s for s in mix.drafters if s in gpu_slugs and mix.drafters[s] > 0)
            mix.drafters[slug] -= 1
            mix.drafters += Counter()  # drop zeros
            mix.verifiers[slug] += 1
            mix.gpu_drafters -= 1
            want -= 1
    if want > 0:
        notes.append(
            f"only {int(changes['move_to_verify']) - want} GPU drafters could move to verification"
        )
    want = int(changes.get("move_to_draft") or 0)
    for mix in mixes:
        while want > 0 and sum(mix.verifiers.values()) > 1:
            slug = next((s for s in mix.verifiers if s in gpu_slugs and mix.verifiers[s] > 0), None)
            if slug is None:
                break
            mix.verifiers[slug] -= 1
            mix.verifiers += Counter()
            mix.drafters[slug] += 1
            mix.gpu_drafters += 1
            want -= 1
    if want > 0:
        notes.append(
            f"only {int(changes['move_to_draft']) - want} GPU verifiers could move to drafting"
        )
    for role in ("drafters", "verifiers"):
        n = int(changes.get(f"add_{role}") or 0)
        slug = changes.get(f"add_{role[:-1]}_profile")
        if n <= 0:
            continue
        if slug not in profiles:
            notes.append(f"unknown profile {slug!r} for add_{role}")
            continue
        if role == "verifiers" and profiles[slug].kind == ProfileKind.SRAM_ACCELERATOR:
            notes.append(f"{slug} cannot verify (SRAM accelerators draft only)")
            continue
        targets = [m for m in mixes if sum(m.verifiers.values()) > 0] or mixes

        def add(mix, role=role, slug=slug):
            getattr(mix, role)[slug] += 1
            if role == "drafters" and profiles[slug].kind == ProfileKind.GPU:
                mix.gpu_drafters += 1

        _spread(targets, n, add)
        if not targets:
            notes.append("no pipeline to add nodes to")
    return notes


def what_if(changes: dict, *, include_simulated: bool = True) -> dict:
    mixes, profiles = current_fleet(include_simulated=include_simulated)
    unusable = HardwareProfile.objects.exclude(slug__in=list(profiles)).values_list(
        "slug", flat=True
    )
    prices = {k: float(v) for k, v in (changes.get("prices") or {}).items()}
    before = evaluate(mixes, profiles, prices, today=True)
    measured = measured_fleet(mixes)
    notes = apply_changes(mixes, profiles, changes)
    after = evaluate(mixes, profiles, prices, today=True)
    notes += [
        f"profile {slug!r} lacks bandwidth or FLOPs: its pipelines are not modeled"
        for slug in unusable
    ]
    return {
        "modeled": True,
        "changes": changes,
        "before": before,
        "measured": measured,
        "after": after,
        "delta": {key: (before[key], after[key]) for key in DELTA_KEYS},
        "notes": notes,
    }
