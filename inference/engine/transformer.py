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
from .linear import FusedLinear, stamp

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
        if x.dtype == torch.float32:  # one fused op; the same formula as below
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rope_inv_freq(config: ModelConfig) -> Tensor:
    """Inverse frequencies with ``rope_scaling`` applied (default, linear, llama3)."""
    d = config.head_size
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


def apply_rope(x: Tensor, cos: Tensor, sin_signed: Tensor) -> Tensor:
    """``x * cos + rotate_half(x) * sin`` in three ops: ``rotate_half(x) * sin`` equals
    ``roll(x, d/2) * cat(-sin_1, sin_2)`` bit for bit (the two halves of sin are equal);
    ``addcmul`` may fuse the final multiply-add, a last-bit difference at most."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), sin_signed)


class Attention(nn.Module):
    def __init__(self, c: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer, self.n_heads, self.n_kv, self.head_dim = (
            layer,
            c.num_attention_heads,
            c.kv_heads,
            c.head_size,
        )
        self.q_proj = nn.Linear(c.hidden_size, self.n_heads * self.head_dim, bias=c.qkv_bias)
        self.k_proj = nn.Linear(c.hidden_size, self.n_kv * self.head_dim, bias=c.qkv_bias)
        self.v_proj = nn.Linear(c.hidden_size, self.n_kv * self.head_dim, bias=c.qkv_bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, c.hidden_size, bias=c.o_bias)
        self.qkv = FusedLinear([self.q_proj, self.k_proj, self.v_proj])
        self.out = FusedLinear([self.o_proj])

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, step: _AnyStep | None) -> Tensor:
        B, T, _ = x.shape
        nh, nkv = self.n_heads, self.n_kv
        qkv = self.qkv(x).view(B, T, nh + 2 * nkv, self.head_dim)
        qk = apply_rope(qkv[:, :, : nh + nkv], cos[:, :, None], sin[:, :, None])
        q, k, v = qk[:, :, :nh], qk[:, :, nh:], qkv[:, :, nh + nkv :]
        if step is None:
            mask, causal = None, True
        else:
            k, v = step.write_read(self.layer, k, v)
            mask, causal = step.mask, step.causal
            q = step.scatter_queries(q)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        if nkv != nh:  # GQA by expansion: keeps the fused masked kernels usable
            k = k.repeat_interleave(nh // nkv, dim=1)
            v = v.repeat_interleave(nh // nkv, dim=1)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k, v, attn_mask=mask, is_causal=causal
        )
        if step is not None:
            y = step.gather_outputs(y)
        return self.out(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=c.mlp_bias)
        self.gate_up = FusedLinear([self.gate_proj, self.up_proj])
        self.down = FusedLinear([self.down_proj])

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig, layer: int) -> None:
        super().__init__()
        self.self_attn = Attention(c, layer)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, step: _AnyStep | None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, step)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, i) for i in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def decoder_layers(self) -> list[DecoderLayer]:
        """``layers`` typed: a ``ModuleList`` yields plain ``nn.Module``s."""
        out = []
        for layer in self.layers:
            assert isinstance(layer, DecoderLayer)
            out.append(layer)
        return out


class _Step:
    """One cached forward, planned once on the host for all layers: where each row's new
    K/V go, which cached keys each row reads, positions and the attention mask.

    Reads: rows in consecutive slots read a view of the cache (one sequence without padding
    also writes a slice). Rows in any order whose slots fill 80% of a range of slots attend
    over a view of that whole range, their queries scattered to their slots' places (the
    other places get zero queries, whose outputs are dropped). That is a little more attention
    arithmetic instead of copying every row's keys and values, which cost a quarter of a
    32-row verify pass. Only sparse batches gather."""

    def __init__(self, cache: KVCache, slots: list[int], n_valid: list[int], T: int) -> None:
        dev = cache.k[0].device
        self.cache = cache
        start = cache.reserve(slots, n_valid)  # raises CacheOverflow before any write
        self.n_keys = max(max(a + n for a, n in zip(start, n_valid, strict=True)), 1)
        self.end = max(start) + T  # past the largest position, padding included
        B = len(slots)
        dense = all(n == T for n in n_valid)
        self.single = B == 1 and dense
        self.first = slots[0]
        lo, span = min(slots), max(slots) - min(slots) + 1
        self.rows: Tensor | None = None
        self.spread: Tensor | None = None
        self.pos_slice: tuple[int, int] | None
        if slots == list(range(slots[0], slots[0] + B)):
            pass  # a view of consecutive slots
        elif span <= B + B // 4:
            self.first, self.span = lo, span
            self.spread = torch.tensor([s - lo for s in slots], device=dev)
        else:
            self.rows = torch.tensor(slots, device=dev)  # gather
        if self.single:
            self.pos_slice = (start[0], start[0] + T)
            self.positions = None
        else:
            self.pos_slice = None
            t = torch.arange(T)
            start_t, n_t = torch.tensor(start), torch.tensor(n_valid)
            valid = t[None, :] < n_t[:, None]
            self.positions = (start_t[:, None] + t[None, :]).to(dev)
            slots_t = torch.tensor(slots)
            self.w_slot = torch.where(valid, slots_t[:, None], cache.scratch).to(dev)
            self.w_pos = torch.where(valid, start_t[:, None] + t[None, :], t[None, :]).to(dev)
        # masks: none for one new token of one sequence; causal from an empty cache
        self.mask, self.causal = None, False
        if self.single and T == 1:
            pass
        elif self.single and start[0] == 0:
            self.causal = True
        else:
            keys = torch.arange(self.n_keys, device=dev)
            pos = (
                self.positions
                if self.positions is not None
                else torch.arange(start[0], start[0] + T, device=dev)[None]
            )
            self.mask = (keys[None, None, :] <= pos[:, :, None])[:, None]
            if self.spread is not None:  # the range's other rows attend to everything
                full = torch.ones(self.span, *self.mask.shape[1:], dtype=torch.bool, device=dev)
                full[self.spread] = self.mask
                self.mask = full

    def scatter_queries(self, q: Tensor) -> Tensor:
        """[B, ...] queries -> [span, ...] in slot order, for a spread batch."""
        if self.spread is None:
            return q
        full = q.new_zeros(self.span, *q.shape[1:])
        full[self.spread] = q
        return full

    def gather_outputs(self, y: Tensor) -> Tensor:
        return y if self.spread is None else y[self.spread]

    def write_read(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        kc, vc = self.cache.k[layer], self.cache.v[layer]
        if self.single:
            assert self.pos_slice is not None  # set for every single-sequence step
            a, b = self.pos_slice
            kc[self.first, a:b] = k[0]
            vc[self.first, a:b] = v[0]
        else:
            kc[self.w_slot, self.w_pos] = k
            vc[self.w_slot, self.w_pos] = v
        if self.rows is not None:
            return kc[self.rows, : self.n_keys], vc[self.rows, : self.n_keys]
        n = k.shape[0] if self.spread is None else self.span
        return kc[self.first : self.first + n, : self.n_keys], vc[
            self.first : self.first + n, : self.n_keys
        ]


class _StaticStep:
    """A cached forward with shapes fixed by (rows, T, n_keys) alone, for CUDA graphs: row i
    of the batch IS slot i (rows of slots not in the batch carry ``n_valid`` 0), every row
    attends over a view of the first ``n_keys`` positions of its slot under a length mask,
    and every write is one scatter (invalid positions go to the scratch slot). Nothing here
    reads a device value on the host."""

    mask_is_static = True
    causal = False

    def __init__(self, cache: KVCache, start: Tensor, n_valid: Tensor, T: int, n_keys: int):
        dev = start.device
        B = start.shape[0]
        self.cache, self.B, self.n_keys = cache, B, n_keys
        t = torch.arange(T, device=dev)
        valid = t[None, :] < n_valid[:, None]
        # padded queries past the key range read clamped positions (their outputs are dropped)
        self.positions = (start[:, None] + t[None, :]).clamp(max=n_keys - 1)
        rows = torch.arange(B, device=dev)[:, None]
        self.w_slot = torch.where(valid, rows, cache.scratch)
        self.w_pos = torch.where(valid, self.positions, t[None, :])
        keys = torch.arange(n_keys, device=dev)
        self.mask = (keys[None, None, :] <= self.positions[:, :, None])[:, None]

    def scatter_queries(self, q: Tensor) -> Tensor:
        return q

    def gather_outputs(self, y: Tensor) -> Tensor:
        return y

    def write_read(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        kc, vc = self.cache.k[layer], self.cache.v[layer]
        kc[self.w_slot, self.w_pos] = k
        vc[self.w_slot, self.w_pos] = v
        return kc[: self.B, : self.n_keys], vc[: self.B, : self.n_keys]


_AnyStep = _Step | _StaticStep


class Transformer(nn.Module):
    # buffers (``register_buffer``): typed here, ``nn.Module.__getattr__`` returns a union
    vocab_ids: Tensor | None
    inv_freq: Tensor

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        n_out = config.draft_vocab_size or config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, n_out, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        # a reduced head's token ids (row i of lm_head scores token vocab_ids[i]); None: all
        ids = torch.zeros(n_out, dtype=torch.long) if config.draft_vocab_size else None
        self.register_buffer("vocab_ids", ids)
        self.register_buffer("inv_freq", rope_inv_freq(config), persistent=False)
        self.head = FusedLinear([self.lm_head])
        self.apply(self._init_weights)
        self.fuse_weights_()

    def fused_linears(self) -> list[FusedLinear]:
        out = [self.head]
        for layer in self.model.decoder_layers():
            out += [layer.self_attn.qkv, layer.self_attn.out, layer.mlp.gate_up, layer.mlp.down]
        return out

    def fuse_weights_(self) -> Transformer:
        """One copy of every weight: q/k/v and gate/up each live in one buffer that their
        parameters view, so the fused matmuls read the parameters themselves. Idempotent;
        call it again after ``.to()`` (which copies every parameter on its own)."""
        for f in self.fused_linears():
            f.share_storage_()
        return self

    @staticmethod
    def _init_weights(m: nn.Module, std: float = 0.02) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def rope_tables(self, n: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """(cos, sin with its first half negated) for positions 0..n-1, [n, head_dim],
        computed once per dtype (and again only when a longer one is needed)."""
        key = (dtype, self.inv_freq.device, stamp(self.inv_freq))
        cached = getattr(self, "_rope", None)
        if cached is None or cached[0] != key or cached[1].shape[0] < n:
            self._rope = cached = (
                key,
                *self._build_rope(max(n, self.config.max_position_embeddings), dtype),
            )
        return cached[1], cached[2]

    # normal tensors even when first asked for under inference_mode: training reuses them
    @torch.inference_mode(False)
    @torch.no_grad()
    def _build_rope(self, n: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        freqs = (
            torch.arange(n, device=self.inv_freq.device).float()[:, None] * self.inv_freq.float()
        )
        emb = torch.cat((freqs, freqs), dim=-1)
        half = freqs.shape[-1]
        cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
        return cos, torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)

    def hidden(
        self,
        tokens: Tensor,
        cache: KVCache | None = None,
        slots: Tensor | list[int] | None = None,
        n_valid: Tensor | list[int] | None = None,
    ) -> Tensor:
        """Final-norm hidden states [B, T, H]. See ``forward``."""
        B, T = tokens.shape
        x = self.model.embed_tokens(tokens)
        if cache is None:
            step = None
            cos, sin = self.rope_tables(T, x.dtype)
            cos, sin = cos[None, :T], sin[None, :T]
        else:
            if slots is None:
                raise ValueError("a cache needs slots")
            slot_list = slots.tolist() if isinstance(slots, Tensor) else list(slots)
            if n_valid is None:
                n_list = [T] * B
            else:
                n_list = n_valid.tolist() if isinstance(n_valid, Tensor) else list(n_valid)
            step = _Step(cache, slot_list, n_list, T)
            if step.single:
                assert step.pos_slice is not None
                a, b = step.pos_slice
                cos, sin = self.rope_tables(b, x.dtype)
                cos, sin = cos[None, a:b], sin[None, a:b]
            else:
                cos, sin = self.rope_tables(step.end, x.dtype)
                cos, sin = cos[step.positions], sin[step.positions]
        if x.device.type == "cuda":
            with sdpa_kernel(_SDPA_BACKENDS):  # not cuDNN: it re-plans for every new key length
                x = self._layers(x, cos, sin, step)
        else:
            x = self._layers(x, cos, sin, step)
        if cache is not None:
            cache.advance(slot_list, n_list)
        return self.model.norm(x)

    def static_logits(
        self, tokens: Tensor, cache: KVCache, start: Tensor, n_valid: Tensor, n_keys: int
    ) -> Tensor:
        """Logits [B, T, V] of a ``_StaticStep`` forward: tokens [B, T] where row i is slot i,
        start [B] its cache length, n_valid [B] its real tokens (0: not in the batch). All
        device tensors, no host reads: capturable as a CUDA graph. The cache's host-side
        lengths are the caller's to advance."""
        step = _StaticStep(cache, start, n_valid, tokens.shape[1], n_keys)
        x = self.model.embed_tokens(tokens)
        cos, sin = self.rope_tables(cache.max_len, x.dtype)
        cos, sin = cos[step.positions], sin[step.positions]
        if x.device.type == "cuda":
            with sdpa_kernel(_SDPA_BACKENDS):
                x = self._layers(x, cos, sin, step)
        else:
            x = self._layers(x, cos, sin, step)
        return self.logits(self.model.norm(x))

    def _layers(self, x: Tensor, cos: Tensor, sin: Tensor, step: _AnyStep | None) -> Tensor:
        for layer in self.model.layers:
            x = layer(x, cos, sin, step)
        return x

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
        return self.logits(self.hidden(tokens, cache, slots, n_valid))

    def logits(self, h: Tensor) -> Tensor:
        """The head on final hidden states (one matmul, packed on CPU like the others):
        [..., V] logits, or [..., draft_vocab_size] for a reduced head (see ``vocab_ids``)."""
        return self.head(h)
