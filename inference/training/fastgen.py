"""Batched greedy generation for training-time data (distillation pools, evaluation).

The engine's KV cache serves many independent sequences (slots, rollback, padding), and
gathers each slot's keys per step; for a large batch of equal-length sequences that gather
dominates. Here every sequence advances in lockstep, so the cache is a preallocated
[B, H, T, D] tensor per layer that is written in place and read as a view. Same modules,
same arithmetic as ``Transformer.forward``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from inference.engine.transformer import Transformer, rotate_half


def _rope(model: Transformer, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    freqs = positions[..., None].float() * model.inv_freq.float()
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype)[:, :, None], emb.sin().to(dtype)[:, :, None]


@torch.inference_mode()
def lockstep_greedy(model: Transformer, prompts: Tensor, n_new: int) -> Tensor:
    """Greedy continuation of equal-length prompts [B, P] -> [B, P + n_new]."""
    c = model.config
    B, P = prompts.shape
    total = P + n_new
    dtype = model.lm_head.weight.dtype
    ks = [torch.empty(B, c.kv_heads, total, c.head_size, dtype=dtype) for _ in model.model.layers]
    vs = [torch.empty_like(k) for k in ks]
    out = torch.empty(B, total, dtype=torch.long)
    out[:, :P] = prompts
    x_tok, start = prompts, 0
    for step in range(n_new):
        T = x_tok.shape[1]
        pos = torch.arange(start, start + T).expand(B, T)
        cos, sin = _rope(model, pos, dtype)
        x = model.model.embed_tokens(x_tok)
        for i, layer in enumerate(model.model.decoder_layers()):
            a = layer.self_attn
            h = layer.input_layernorm(x)
            q = a.q_proj(h).view(B, T, a.n_heads, a.head_dim)
            k = a.k_proj(h).view(B, T, a.n_kv, a.head_dim)
            v = a.v_proj(h).view(B, T, a.n_kv, a.head_dim)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            ks[i][:, :, start : start + T] = k.transpose(1, 2)
            vs[i][:, :, start : start + T] = v.transpose(1, 2)
            y = F.scaled_dot_product_attention(
                q.transpose(1, 2),
                ks[i][:, :, : start + T],
                vs[i][:, :, : start + T],
                is_causal=T > 1,
                enable_gqa=a.n_kv != a.n_heads,
            )
            x = x + a.o_proj(y.transpose(1, 2).reshape(B, T, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        logits = model.lm_head(model.model.norm(x[:, -1]))
        nxt = logits.argmax(-1)
        out[:, P + step] = nxt
        x_tok, start = nxt[:, None], start + T
    return out
