"""Batched rejection sampling for speculative decoding (after vLLM's rejection sampler).

For draft token d_i with draft distribution q_i and target distribution p_i: accept with
probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection emit a token from
norm(max(0, p_i - q_i)); when all drafts are accepted emit a bonus token from p_k. The
output is distributed exactly as sampling from the target. Greedy rows take the exact-match
fast path: accept while d_i == argmax p_i, then emit argmax at the first mismatch.

The function is pure: randomness comes in as tensors (``uniform``, ``noise``), so the engine
can draw them from per-sequence generators and tests can draw millions at once.
"""

from __future__ import annotations

import torch
from torch import Tensor


def rejection_sample(
    target_probs: Tensor,
    draft_tokens: Tensor,
    n_draft: Tensor,
    draft_probs: Tensor | None,
    greedy: Tensor,
    uniform: Tensor,
    noise: Tensor,
) -> tuple[Tensor, Tensor]:
    """Accept/reject padded drafts of a batch.

    target_probs [B, K+1, V]: p at every draft position and the bonus position.
    draft_tokens [B, K] (right-padded), n_draft [B]: real draft lengths.
    draft_probs [B, K, V] or None (None, or rows of zeros, mean one-hot q: greedy/n-gram).
    greedy [B] bool; uniform [B, K] U(0,1); noise [B, V] Exp(1) for the one emitted sample.
    Returns (n_accepted [B], next_token [B]): the output is draft_tokens[b, :n_accepted[b]]
    followed by next_token[b] (correction or bonus).
    """
    B, K1, V = target_probs.shape
    K = K1 - 1
    valid = torch.arange(K, device=draft_tokens.device)[None] < n_draft[:, None]
    d = draft_tokens.clamp(0, V - 1)
    p_d = target_probs[:, :K].gather(-1, d[..., None])[..., 0]  # [B, K]
    onehot = torch.zeros(B, K, V, device=target_probs.device).scatter_(-1, d[..., None], 1.0)
    if draft_probs is None:
        q = onehot
    else:
        missing = draft_probs.sum(-1, keepdim=True) == 0
        q = torch.where(missing, onehot, draft_probs.float())
    q_d = q.gather(-1, d[..., None])[..., 0]
    argmax = target_probs.argmax(-1)  # [B, K+1]
    accept = torch.where(greedy[:, None], d == argmax[:, :K], uniform * q_d < p_d)
    accept &= valid
    n_acc = accept.long().cumprod(-1).sum(-1)  # accepted prefix length
    # The emitted token's distribution: residual at the first rejection, else p at bonus.
    rows = torch.arange(B, device=target_probs.device)
    p_at = target_probs[rows, n_acc]  # [B, V]
    rejected = n_acc < n_draft
    q_at = q[rows, n_acc.clamp(max=max(K - 1, 0))] if K else torch.zeros_like(p_at)
    resid = (p_at - q_at).clamp(min=0)
    rsum = resid.sum(-1, keepdim=True)
    resid = torch.where(rsum > 0, resid / rsum.clamp(min=1e-30), p_at)
    dist = torch.where(rejected[:, None], resid, p_at)
    sampled = (dist / noise).argmax(-1)
    next_token = torch.where(greedy, argmax.gather(-1, n_acc[:, None])[:, 0], sampled)
    return n_acc, next_token
