"""Recommendations: the k per batch-size range and the drafter:verifier split that maximize
predicted goodput within the pipeline's SLOs and power budget; previews of any action.

Pure functions of a `PipelineModel` plus thin wrappers that read a Pipeline. The ITL p99
SLO is checked against the round time (tokens of a sequence arrive once per round, so the
longest gap between tokens is a round), the TTFT p99 SLO against prefill + one hop.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.pipelines.policy import k_for, validate_policy
from fleet.planner.model import PipelineModel, Prediction, predict

K_MAX = 8


def batch_grid(max_batch: int) -> list[int]:
    grid, b = [], 1
    while b < max_batch:
        grid.append(b)
        b *= 2
    grid.append(max_batch)
    return grid


def meets_slos(p: Prediction, *, itl_slo_ms: float | None, ttft_slo_ms: float | None) -> bool:
    if itl_slo_ms is not None and p.round_s * 1000 > itl_slo_ms:
        return False
    if ttft_slo_ms is not None and p.ttft_s * 1000 > ttft_slo_ms:
        return False
    return True


def best_k_at(
    m: PipelineModel,
    batch: int,
    *,
    k_min: int = 0,
    k_max: int = K_MAX,
    itl_slo_ms: float | None = None,
    ttft_slo_ms: float | None = None,
) -> Prediction:
    """Goodput-max k at `batch` among those meeting the SLOs (all of them if none does)."""
    preds = [predict(m, k=k, batch=batch) for k in range(k_min, k_max + 1)]
    ok = [p for p in preds if meets_slos(p, itl_slo_ms=itl_slo_ms, ttft_slo_ms=ttft_slo_ms)]
    return max(ok or preds, key=lambda p: (round(p.goodput_tps, 9), -p.k))


def k_table(
    m: PipelineModel,
    max_batch: int,
    *,
    k_min: int = 0,
    k_max: int = K_MAX,
    itl_slo_ms: float | None = None,
    ttft_slo_ms: float | None = None,
) -> list[list[int]]:
    """[[max_batch, k], ...]: the best k per batch-size range (runs of equal k merged)."""
    rows: list[list[int]] = []
    for b in batch_grid(max_batch):
        k = best_k_at(
            m, b, k_min=k_min, k_max=k_max, itl_slo_ms=itl_slo_ms, ttft_slo_ms=ttft_slo_ms
        ).k
        if rows and rows[-1][1] == k:
            rows[-1][0] = b
        else:
            rows.append([b, k])
    return rows


def policy_from_table(table: list[list[int]]) -> dict:
    if len(table) == 1:
        return {"mode": "fixed", "k": table[0][1]}
    return {"mode": "table", "table": table}


def predict_policy(m: PipelineModel, policy: dict, batch: int) -> Prediction:
    """What a k policy gives at `batch`. An adaptive policy is assumed to have found the
    goodput-max k within its bounds (that is what it searches for)."""
    policy = validate_policy(policy)
    if policy["mode"] == "adaptive":
        return best_k_at(m, batch, k_min=policy["k_min"], k_max=policy["k_max"])
    return predict(m, k=k_for(policy, batch), batch=batch)


@dataclass(frozen=True)
class Split:
    n_verifiers: int
    n_drafters: int
    prediction: Prediction
    within_budget: bool


def best_split(
    m: PipelineModel,
    *,
    batch: int,
    flexible_drafters: int,
    flexible_verifiers: int,
    power_budget_w: float | None = None,
    itl_slo_ms: float | None = None,
    ttft_slo_ms: float | None = None,
    k_max: int = K_MAX,
    needs_drafter: bool = True,
) -> tuple[Split, list[Split]]:
    """Best drafter:verifier split reachable by switching flexible nodes' roles (total nodes
    unchanged), each split at its own best k. Returns (best, all candidates)."""
    V, D = m.n_verifiers, m.n_drafters
    splits = []
    for v in range(max(1, V - flexible_verifiers), V + flexible_drafters + 1):
        d = V + D - v
        if d < (1 if needs_drafter else 0):
            continue
        mv = m.with_(n_verifiers=v, n_drafters=d)
        p = best_k_at(mv, batch, k_max=k_max, itl_slo_ms=itl_slo_ms, ttft_slo_ms=ttft_slo_ms)
        within = power_budget_w is None or p.power_w <= power_budget_w
        splits.append(Split(v, int(d), p, within))
    if not splits:
        p = best_k_at(m, batch, k_max=k_max)
        current = Split(V, int(D), p, power_budget_w is None or p.power_w <= power_budget_w)
        return current, [current]
    ok = [s for s in splits if s.within_budget] or splits
    best = max(ok, key=lambda s: (round(s.prediction.goodput_tps, 9), -abs(s.n_verifiers - V)))
    return best, splits


def difference(before: Prediction, after: Prediction) -> dict:
    def pct(a: float, b: float) -> float | None:
        return round((b - a) / a * 100, 2) if a else None

    return {
        "goodput_tps": round(after.goodput_tps - before.goodput_tps, 3),
        "goodput_pct": pct(before.goodput_tps, after.goodput_tps),
        "itl_ms": round((after.itl_s - before.itl_s) * 1000, 4),
        "tokens_per_j_pct": pct(before.tokens_per_j, after.tokens_per_j),
        "power_w": round(after.power_w - before.power_w, 2),
    }
