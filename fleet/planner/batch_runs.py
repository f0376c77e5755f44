"""Predictions for one finite batch of generations (what a benchmark measures): sequences
in lockstep from prefill to the last one's end, the batch shrinking as they finish.
Pure Python, on top of `fleet.planner.model`."""

from __future__ import annotations

import random
from collections.abc import Sequence

from fleet.planner.model import PipelineModel


def conditional_acceptance(per_position: Sequence[float]) -> list[float]:
    """P(position i accepted | all before it accepted), from cumulative per-position rates."""
    out, prev = [], 1.0
    for p in per_position:
        out.append(min(float(p) / prev, 1.0) if prev > 0 else 0.0)
        prev = float(p)
    return out


def predict_run(
    m: PipelineModel,
    *,
    k: int,
    batch: int,
    new_tokens: int,
    prefill_s: float = 0.0,
    trials: int = 200,
    seed: int = 0,
) -> dict:
    """Wall time and goodput of ONE batch of `batch` sequences generating `new_tokens` each
    in lockstep (a verifier's batch from admission to the last sequence's end): the first
    token comes from prefill, then rounds until every sequence has its tokens; sequences that
    finish leave the batch, so late rounds run smaller. Acceptance per position is drawn
    from the model's per-position rates (Monte Carlo, `trials` runs, seeded); step times
    come from the model's curves at each round's live batch size."""
    rng = random.Random(seed)
    cond = (
        conditional_acceptance(m.per_position) if m.per_position else [m.alpha or 0.0] * max(k, 1)
    )
    while len(cond) < k:
        cond.append(cond[-1] if cond else 0.0)
    total_time = 0.0
    for _ in range(trials):
        remaining = [new_tokens - 1] * batch
        t = prefill_s
        while True:
            live = [i for i, r in enumerate(remaining) if r > 0]
            if not live:
                break
            b = len(live)
            kk = k if (k > 0 and m.drafter_kind != "none") else 0
            t_d = m.t_draft(b) if kk else 0.0
            scored = sum(min(kk, remaining[i] - 1) + 1 for i in live)
            t_v = m.t_verify(b, scored)
            over = m.overhead_curve(scored, b) if m.overhead_curve is not None else 0.0
            t += kk * t_d + t_v + m.rest_s(b, kk) + over
            for i in live:
                cap = min(kk, remaining[i] - 1)
                a = 0
                while a < cap and rng.random() < cond[a]:
                    a += 1
                remaining[i] -= a + 1
        total_time += t
    wall = total_time / trials
    return {
        "k": k,
        "batch": batch,
        "wall_s": wall,
        "goodput_tps": batch * new_tokens / wall if wall else 0.0,
    }


def predict_run_trace(
    m: PipelineModel, *, k: int, traces: Sequence[Sequence[bool]], prefill_s: float = 0.0
) -> dict:
    """`predict_run` for greedy decoding with a measured acceptance *trace* per sequence:
    `traces[s][j]` says whether the drafter's greedy token at output position j (given the
    true prefix) equals the target's. Greedy output does not depend on k, so the trace
    decides exactly which drafts are accepted for every k: the rounds, and the live batch and
    tokens scored in each, follow without sampling; step times come from the curves."""
    n_new = [len(t) for t in traces]
    pos = [1] * len(traces)  # token 0 comes from prefill
    kk = k if (k > 0 and m.drafter_kind != "none") else 0
    t = prefill_s
    rounds = 0
    while True:
        live = [i for i in range(len(traces)) if pos[i] < n_new[i]]
        if not live:
            break
        rounds += 1
        b = len(live)
        caps = {i: min(kk, n_new[i] - pos[i] - 1) for i in live}
        scored = sum(caps[i] + 1 for i in live)
        over = m.overhead_curve(scored, b) if m.overhead_curve is not None else 0.0
        t += (kk * m.t_draft(b) if kk else 0.0) + m.t_verify(b, scored) + m.rest_s(b, kk) + over
        for i in live:
            a = 0
            while a < caps[i] and traces[i][pos[i] + a]:
                a += 1
            pos[i] += a + 1
    tokens = sum(n_new)
    return {
        "k": k,
        "batch": len(traces),
        "rounds": rounds,
        "wall_s": t,
        "goodput_tps": tokens / t if t else 0.0,
    }
