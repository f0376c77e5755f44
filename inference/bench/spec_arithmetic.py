"""Speculative-decoding arithmetic shared by the benchmark and its report."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def expected_tokens_per_round(alpha: float, k: int) -> float:
    """E = (1 - alpha^(k+1)) / (1 - alpha): tokens emitted per verification round."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def ideal_speedup(alpha: float, k: int, c: float) -> float:
    """S = E / (k c + 1): speculative over plain decoding when a verification step of k+1
    tokens costs one plain step and a draft step costs c plain steps."""
    return expected_tokens_per_round(alpha, k) / (k * c + 1)


def alpha_from_positions(accepted_per_pos: Sequence[int], drafted_per_pos: Sequence[int]) -> float:
    """Per-token acceptance probability alpha from per-position counters.

    Greedy verification accepts a prefix: draft position i counts as a trial only in the
    rounds where position i-1 was accepted (position 0: every round that drafted it). With
    a_i accepted at position i and d_i drafted, trials_i = min(d_i, a_{i-1}) and
    alpha = sum a_i / sum trials_i, i.e. the pooled ratio of consecutive per-position
    acceptance counts (the maximum-likelihood estimate of a geometric stopping process).
    """
    acc = sum(accepted_per_pos)
    tried = 0
    for i, d in enumerate(drafted_per_pos):
        tried += (
            d if i == 0 else min(d, accepted_per_pos[i - 1] if i - 1 < len(accepted_per_pos) else 0)
        )
    return acc / tried if tried else 0.0


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")
