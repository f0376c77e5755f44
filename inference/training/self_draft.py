"""A draft model cut from its target (self-speculative, LayerSkip / Draft&Verify style) with a
reduced-vocabulary head (FR-Spec), and the frequency count that chooses that vocabulary.

The draft starts as the target's embeddings, its first ``n_layers`` decoder layers and its
final norm, so its guesses are the target's early-exit guesses before any training; its head
scores only ``vocab_ids`` (the target's most frequent tokens), the rows of the target's head
for them. Same tokenizer, same token ids: ``vocab_size`` stays the target's.

Pure PyTorch, no Django.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

from inference.engine.transformer import Transformer


def frequent_tokens(
    sequences: list[list[int]], n: int, vocab_size: int, always: Sequence[int] = ()
) -> Tensor:
    """The ``n`` most frequent ids in ``sequences`` (ties: lower id first), ``always`` first
    (EOS: a draft that cannot propose the end never matches it); sorted ascending."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for s in sequences:
        counts += torch.bincount(torch.tensor(s, dtype=torch.long), minlength=vocab_size)
    if len(always):
        counts[list(always)] = counts.max() + 1
    order = torch.sort(-counts, stable=True).indices[: min(n, vocab_size)]  # ties: lower id
    return order.sort().values


@torch.no_grad()
def self_draft(target: Transformer, n_layers: int, vocab_ids: Tensor | None) -> Transformer:
    """A new Transformer: copies of the target's embeddings, first ``n_layers`` layers and
    final norm, and the head rows of ``vocab_ids`` (None: the whole head). float32."""
    c = target.config
    if not 0 < n_layers <= c.num_hidden_layers:
        raise ValueError(f"n_layers must be in 1..{c.num_hidden_layers}")
    cfg = replace(
        c,
        num_hidden_layers=n_layers,
        tie_word_embeddings=False,
        draft_vocab_size=len(vocab_ids) if vocab_ids is not None else None,
        extra=dict(c.extra),
    )
    draft = Transformer(cfg)
    sd = {
        k: v.detach().float().clone()
        for k, v in target.state_dict().items()
        if not k.startswith("model.layers.") or int(k.split(".")[2]) < n_layers
    }
    head = sd.pop("lm_head.weight", None)
    if head is None:  # tied: the head is the embedding matrix
        head = sd["model.embed_tokens.weight"]
    if vocab_ids is not None:
        ids = vocab_ids.to(torch.long).cpu()
        sd["lm_head.weight"] = head[ids].clone()
        sd["vocab_ids"] = ids.clone()
    else:
        sd["lm_head.weight"] = head.clone()
    draft.load_state_dict(sd, strict=True)
    return draft.fuse_weights_().eval()
