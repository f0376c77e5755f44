"""Greedy speculative acceptance of a draft against a target, measured exactly.

With greedy verification every accepted token is the target's own greedy token, so a
speculative run follows the target's greedy path. The draft's proposal at position t is
its argmax given that path's prefix; one teacher-forced draft pass over the target's
greedy continuation therefore tells, for every position, whether the draft would have
matched, and the rounds (k drafts, then the target's correction or bonus token) can be
replayed on those matches. Same numbers as running the speculative loop, far cheaper.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from inference.engine.kv_cache import KVCache


@torch.inference_mode()
def greedy_generate(model: nn.Module, prompts: Tensor, n_new: int) -> Tensor:
    """Greedy continuation of equal-length prompts [B, P] -> [B, P + n_new], KV-cached."""
    B, P = prompts.shape
    cache = KVCache.for_model(model, B, P + n_new + 1)
    slots = torch.tensor([cache.allocate() for _ in range(B)])
    nxt = model(prompts, cache, slots)[:, -1].argmax(-1)
    out = [nxt]
    for _ in range(n_new - 1):
        nxt = model(nxt[:, None], cache, slots)[:, -1].argmax(-1)
        out.append(nxt)
    return torch.cat([prompts, torch.stack(out, dim=1)], dim=1)


@dataclass
class AcceptanceStats:
    k: int
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0
    rejections: int = 0  # rounds that ended with a rejected draft token
    per_position: list[int] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """vLLM's definition: 1 + accepted / drafts (a draft = one round of k tokens)."""
        return 1 + self.accepted / self.rounds if self.rounds else 0.0

    @property
    def alpha(self) -> float:
        """Per-token acceptance probability: accepted / trials, where a round's trials stop
        at its first rejection (the MLE of a geometric stopping process; equal to the
        pooled ratio of consecutive per-position acceptance counts)."""
        den = self.accepted + self.rejections
        return self.accepted / den if den else 0.0

    def to_dict(self) -> dict:
        return {
            "k": self.k,
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "mean_acceptance_length": round(self.mean_acceptance_length, 4),
            "alpha": round(self.alpha, 4),
            "per_position_acceptance": [
                round(a / max(1, self.rounds), 4) for a in self.per_position
            ],
        }


def replay_rounds(matches: list[bool], k: int, stats: AcceptanceStats) -> None:
    """Replay greedy speculative rounds over one sequence's per-position matches
    (``matches[t]``: the draft's guess for generated token t equals the target's), with the
    engine's rules: the first token comes from the prefill, each round drafts
    ``min(k, remaining - 1)`` tokens, emits the accepted ones plus one target token."""
    if len(stats.per_position) < k:
        stats.per_position += [0] * (k - len(stats.per_position))
    p, n = 1, len(matches)
    while p < n:
        kk = min(k, n - p - 1)
        a = 0
        while a < kk and matches[p + a]:
            a += 1
        if kk > 0:
            stats.rounds += 1
            stats.drafted += kk
            stats.accepted += a
            stats.rejections += a < kk
            for i in range(a):
                stats.per_position[i] += 1
        stats.emitted += a + 1
        p += a + 1


@torch.inference_mode()
def greedy_acceptance(
    target: nn.Module,
    draft: nn.Module,
    prompts: Tensor,
    n_new: int,
    k: int = 4,
    sequences: Tensor | None = None,
) -> AcceptanceStats:
    """Acceptance of ``draft`` against ``target``'s greedy continuations of ``prompts``."""
    P = prompts.shape[1]
    seqs = greedy_generate(target, prompts, n_new) if sequences is None else sequences
    d_pred = draft(seqs[:, :-1]).argmax(-1)  # d_pred[:, t-1] is the draft's guess at t
    match = (d_pred[:, P - 1 :] == seqs[:, P:]).tolist()
    stats = AcceptanceStats(k=k)
    for row in match:
        replay_rounds(row, k, stats)
    return stats


@torch.inference_mode()
def teacher_forced_agreement(target: nn.Module, draft: nn.Module, batch: Tensor) -> float:
    """Fraction of positions of real text where both models' argmax agree."""
    return (target(batch).argmax(-1) == draft(batch).argmax(-1)).float().mean().item()
