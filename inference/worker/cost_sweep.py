"""The start-up sweep: a node measures its own step costs before it serves, so the first
rounds already decide k from measured costs (vLLM profiles its cost model the same way).

A verifier times its forward over (batch bucket, tokens per sequence); a drafter times its
k draft steps over (batch bucket, k). Each cell is timed twice and the faster kept (the first
run of a shape pays for allocation). The sweep stops at its time budget
(TANDEM_COST_SWEEP_S, default 2 s); cells it did not reach are estimated from the others
and every live round refines the table (`fleet.planner.costs.StepCosts`). Dummy sequences
only: the engine's counters are restored afterwards, so telemetry never sees the sweep.
"""

from __future__ import annotations

import copy
import logging
import time

from fleet.env import env_float
from fleet.planner.costs import StepCosts

logger = logging.getLogger(__name__)

BUCKETS = (1, 2, 4, 8, 16, 32)
VERIFY_WIDTHS = (1, 2, 3, 5, 9)  # tokens per sequence: k + 1
DRAFT_KS = (1, 2, 4, 8)
PROMPT = [1] * 16


def budget_s() -> float:
    return env_float("TANDEM_COST_SWEEP_S", 2.0, minimum=0.0)


def _timed(fn) -> float:
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _buckets(n_free: int | None, cap: int) -> list[int]:
    room = cap if n_free is None else min(n_free, cap)
    return [b for b in BUCKETS if b <= room]


def sweep_verify(engine, *, max_batch: int = 32, budget: float | None = None) -> StepCosts:
    from inference.engine.sampling import SamplingParams

    budget = budget_s() if budget is None else budget
    costs, start = StepCosts(), time.perf_counter()
    saved = copy.deepcopy(engine.counters)
    params = SamplingParams(temperature=0.0, max_tokens=1 << 20, ignore_eos=True)
    try:
        for b in _buckets(engine.n_free, max_batch):
            ids = [f"__sweep-{b}-{i}" for i in range(b)]
            engine.add_many([(g, list(PROMPT), params) for g in ids])
            try:
                for width in VERIFY_WIDTHS:
                    items = [(g, [0] * (width - 1), None) for g in ids]
                    costs.observe(b, width, _timed(lambda items=items: engine.verify(items)))
                    if time.perf_counter() - start > budget:
                        costs.end_sweep()
                        return costs
            finally:
                for g in ids:
                    engine.free(g)
    except Exception:  # a sweep is an optimisation: never stop a node from serving
        logger.exception("verify cost sweep failed; costs come from live rounds")
    finally:
        engine.counters = saved
    costs.end_sweep()
    return costs


def sweep_draft(engine, *, max_batch: int = 32, budget: float | None = None) -> StepCosts:
    budget = budget_s() if budget is None else budget
    costs, start = StepCosts(), time.perf_counter()
    drafter = engine.drafter  # its own propose: the engine's counters never see the sweep
    try:
        for b in _buckets(engine.n_free, max_batch):
            ids = [f"__sweep-{b}-{i}" for i in range(b)]
            drafter.add_many([(g, list(PROMPT), None) for g in ids])
            try:
                for k in DRAFT_KS:

                    def run(k=k, ids=ids):
                        drafts, _ = drafter.propose([(g, k) for g in ids])
                        for d in drafts:  # keep only the first token: contexts stay short
                            drafter.commit(d.seq_id, d.tokens[:1] or [0], 0)

                    costs.observe(b, k, _timed(run))
                    if time.perf_counter() - start > budget:
                        costs.end_sweep()
                        return costs
            finally:
                for g in ids:
                    drafter.free(g)
    except Exception:
        logger.exception("draft cost sweep failed; costs come from live rounds")
    costs.end_sweep()
    return costs
