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
    if not tokens:
        return []
    lp = logits[: len(tokens)].float().log_softmax(-1)
    idx = torch.tensor(tokens, device=lp.device)
    chosen = lp.gather(-1, idx[:, None])[:, 0].tolist()
    if top <= 0:
        return [[c, []] for c in chosen]
    values, ids = lp.topk(min(top, lp.shape[-1]), dim=-1)
    return [
        [c, [[i, v] for i, v in zip(row_ids, row_vals, strict=True)]]
        for c, row_ids, row_vals in zip(chosen, ids.tolist(), values.tolist(), strict=True)
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
