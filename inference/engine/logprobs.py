"""Log probabilities of emitted and prompt tokens under the target model.

Like vLLM's default (``logprobs_mode="raw_logprobs"``), they are the log-softmax of the
target's raw logits: before temperature, top-k and top-p. So a token's logprob does not
depend on how it was sampled, and a greedy token's logprob is the same as a sampled one's.
Under speculative decoding the target is the verifier: the distribution at each emitted
position is the row of the verify forward that scored it (accepted draft tokens and the
correction or bonus token alike).

Shapes on the wire (JSON): one entry per token ``[logprob, [[id, logprob], ...]]`` with the
``top`` most likely tokens, most likely first (empty when top is 0); a prompt's first token
has no entry (``None``): nothing predicts it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

TokenLogprob = list  # [logprob: float, [[token_id: int, logprob: float], ...]]


def token_logprobs(logits: Tensor, tokens: list[int], top: int) -> list[TokenLogprob]:
    """Entries for ``tokens[i]`` scored by ``logits[i]`` ([T, V], T >= len(tokens))."""
    return batch_token_logprobs(logits[None], [tokens], [top])[0]


def batch_token_logprobs(
    logits: Tensor, tokens: list[list[int]], tops: list[int]
) -> list[list[TokenLogprob]]:
    """``token_logprobs`` for the rows of a batch at once ([B, T, V] logits, B token lists
    and tops): three device-to-host copies for the batch, not three per row."""
    if not any(tokens):
        return [[] for _ in tokens]
    T = max(map(len, tokens))
    x = logits[:, :T].float()
    lse = x.logsumexp(-1, keepdim=True)  # log_softmax = x - lse, never written out whole
    idx = torch.tensor([t + [0] * (T - len(t)) for t in tokens], device=x.device)
    chosen = (x.gather(-1, idx[..., None]) - lse)[..., 0].tolist()
    k = min(max(tops), x.shape[-1])
    ids: list = [[[]] * T] * len(tokens)
    values: list = ids
    if k > 0:
        v, i = x.topk(k, dim=-1)
        values, ids = (v - lse).tolist(), i.tolist()
    return [
        [
            [chosen[b][j], [[ids[b][j][m], values[b][j][m]] for m in range(min(top, k))]]
            for j in range(len(toks))
        ]
        for b, (toks, top) in enumerate(zip(tokens, tops, strict=True))
    ]


PROMPT_CHUNK = 512  # prompt positions per head matmul: a long prompt x a large vocab stays small


def prompt_logprobs(
    head: Callable[[Tensor], Tensor], hidden: Tensor, prompt: list[int], top: int
) -> list[TokenLogprob | None]:
    """Entries for every prompt token from the prefill's final hidden states ``hidden``
    ([>= len(prompt) - 1, H]; position i predicts token i + 1), put through ``head`` (the
    model's logits) PROMPT_CHUNK positions at a time."""
    out: list[TokenLogprob | None] = [None]
    for a in range(0, len(prompt) - 1, PROMPT_CHUNK):
        b = min(a + PROMPT_CHUNK, len(prompt) - 1)
        out += token_logprobs(head(hidden[a:b]), prompt[a + 1 : b + 1], top)
    return out
