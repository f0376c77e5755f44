"""Llama-family decoder (Llama, Qwen2, Mistral-without-sliding-window), gpt-fast style.

Parameter names equal Hugging Face's (``model.layers.0.self_attn.q_proj.weight`` ...), so an
HF state dict loads with ``load_state_dict`` and our checkpoints load in transformers.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .config import ModelConfig
from .kv_cache import KVCache

_SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def right_pad(rows: list[list[int]], device=None) -> tuple[Tensor, Tensor]:
    """Token rows -> (tokens [B, T] right-padded with 0, lengths [B]) for ``n_valid``."""
    n = [len(r) for r in rows]
    T = max(n)
    return torch.tensor([r + [0] * (T - len(r)) for r in rows], device=device), torch.tensor(n)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rope_inv_freq(config: ModelConfig) -> Tensor:
    """Inverse frequencies with ``rope_scaling`` applied (default, linear, llama3)."""
    d = config.head_dim
    inv = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    s = config.rope_scaling or {}
    kind = s.get("rope_type", s.get("type", "default"))
    if kind == "linear":
        inv = inv / s["factor"]
    elif kind == "llama3":
        factor, lo, hi = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old_len = s["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old_len / lo, inv / factor, inv)
        smooth = (old_len / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old_len / hi) & ~(wavelen > old_len / lo)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, c: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer, self.n_heads, self.n_kv, self.head_dim = (
            layer, c.num_attention_heads, c.num_key_value_heads, c.head_dim
        )  # fmt: skip
        self.q_proj = nn.Linear(c.hidden_size, self.n_heads * self.head_dim, bias=c.qkv_bias)
        self.k_proj = nn.Linear(c.hidden_size, self.n_kv * self.head_dim, bias=c.qkv_bias)
        self.v_proj = nn.Linear(c.hidden_size, self.n_kv * self.head_dim, bias=c.qkv_bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, c.hidden_size, bias=c.o_bias)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, ctx: _CacheCtx | None) -> Tensor:
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(B, T, self.n_kv, self.head_dim)
        v = self.v_proj(x).view(B, T, self.n_kv, self.head_dim)
        cos, sin = cos[:, :, None], sin[:, :, None]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if ctx is None:
            k, v, mask, causal = k, v, None, True
        else:
            kc, vc = ctx.cache.k[self.layer], ctx.cache.v[self.layer]
            kc[ctx.w_slot, ctx.w_pos] = k
            vc[ctx.w_slot, ctx.w_pos] = v
            k, v = kc[ctx.slots, : ctx.n_keys], vc[ctx.slots, : ctx.n_keys]
            mask, causal = ctx.mask, False
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        if self.n_kv != self.n_heads:  # GQA by expansion: keeps the fused masked kernels usable
            k = k.repeat_interleave(self.n_heads // self.n_kv, dim=1)
            v = v.repeat_interleave(self.n_heads // self.n_kv, dim=1)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k, v, attn_mask=mask, is_causal=causal
        )
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=c.mlp_bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer: int) -> None:
        super().__init__()
        self.self_attn = Attention(c, layer)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, ctx: _CacheCtx | None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, ctx)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, i) for i in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class _CacheCtx:
    """Per-forward indices shared by all layers: where to write, what to read, the mask."""

    def __init__(self, cache: KVCache, slots: Tensor, n_valid: Tensor, T: int) -> None:
        dev = cache.k[0].device
        start = cache.reserve(slots, n_valid)  # raises CacheOverflow before any write
        t = torch.arange(T)
        valid = t[None, :] < n_valid.cpu()[:, None]
        self.positions = (start[:, None] + t[None, :]).to(dev)
        self.cache, self.slots = cache, slots.to(dev)
        self.w_slot = torch.where(valid, slots.cpu()[:, None], cache.scratch).to(dev)
        self.w_pos = torch.where(valid, start[:, None] + t[None, :], t[None, :]).to(dev)
        self.n_keys = int((start + n_valid.cpu()).max().clamp(min=1))
        keys = torch.arange(self.n_keys, device=dev)
        self.mask = (keys[None, None, :] <= self.positions[:, :, None])[:, None]


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.register_buffer("inv_freq", rope_inv_freq(config), persistent=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m: nn.Module, std: float = 0.02) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def hidden(
        self,
        tokens: Tensor,
        cache: KVCache | None = None,
        slots: Tensor | None = None,
        n_valid: Tensor | None = None,
    ) -> Tensor:
        """Final-norm hidden states [B, T, H]. See ``forward``."""
        B, T = tokens.shape
        if cache is None:
            ctx, positions = None, torch.arange(T, device=tokens.device).expand(B, T)
        else:
            if slots is None:
                raise ValueError("a cache needs slots")
            slots = torch.as_tensor(slots, dtype=torch.long)
            n_valid = torch.full((B,), T) if n_valid is None else torch.as_tensor(n_valid)
            ctx = _CacheCtx(cache, slots, n_valid.long(), T)
            positions = ctx.positions
        freqs = positions[..., None].float() * self.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        x = self.model.embed_tokens(tokens)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        with sdpa_kernel(_SDPA_BACKENDS):  # not cuDNN: it re-plans for every new key length
            for layer in self.model.layers:
                x = layer(x, cos, sin, ctx)
        if cache is not None:
            cache.advance(slots, n_valid)
        return self.model.norm(x)

    def forward(
        self,
        tokens: Tensor,
        cache: KVCache | None = None,
        slots: Tensor | None = None,
        n_valid: Tensor | None = None,
    ) -> Tensor:
        """Logits [B, T, V].

        Without a cache: a plain causal forward. With a cache: row b's tokens are appended at
        slot ``slots[b]``'s current length, attend causally to that slot's own history, and the
        slot's length advances. ``n_valid[b]`` (default T) marks the first n tokens of row b as
        real; the rest is right padding whose K/V go to a scratch slot and whose logits are
        meaningless.
        """
        return self.lm_head(self.hidden(tokens, cache, slots, n_valid))
