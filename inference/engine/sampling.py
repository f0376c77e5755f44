"""Sampling: per-request parameters, logits -> probabilities, and seeded draws.

Every random draw of a sequence comes from that sequence's own ``torch.Generator`` in a
fixed pattern, so a seeded request yields the same tokens whatever else shares its batch.
Sampling uses the exponential race ``argmax(p / E)``, ``E ~ Exp(1)``, which draws exactly
from ``p`` with one noise vector per token.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor


@dataclass
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 or -1 = off
    top_p: float = 1.0
    seed: int | None = None
    max_tokens: int = 16
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    # Target logprobs (``inference.engine.logprobs``): None = off, N = each emitted token's
    # logprob and its N most likely alternatives; prompt_logprobs the same for the prompt
    # (computed in the prefill; with max_tokens 0 the prompt is only scored).
    logprobs: int | None = None
    prompt_logprobs: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.max_tokens < 0:
            raise ValueError(f"invalid sampling parameters: {self}")
        if any(n is not None and n < 0 for n in (self.logprobs, self.prompt_logprobs)):
            raise ValueError(f"invalid sampling parameters: {self}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SamplingParams:
        return cls(**d)


def make_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(secrets.randbits(63) if seed is None else seed)
    return g


def derive_seed(seed: int | None, stream: int) -> int | None:
    """An independent, reproducible seed for another consumer (e.g. the drafter)."""
    return None if seed is None else (seed * 6364136223846793005 + stream) % (1 << 63)


def logits_to_probs(logits: Tensor, params: list[SamplingParams]) -> Tensor:
    """[B, ..., V] logits -> float32 probabilities after temperature, top-k and top-p, one
    SamplingParams per row b. Greedy rows get one-hot argmax distributions."""
    logits = logits.float()
    B, V = logits.shape[0], logits.shape[-1]
    shape = (B,) + (1,) * (logits.dim() - 1)
    dev = logits.device
    greedy = torch.tensor([p.greedy for p in params], device=dev).view(shape)
    temp = torch.tensor([p.temperature or 1.0 for p in params], device=dev).view(shape)
    logits = logits / temp
    top_k = [p.top_k if 0 < p.top_k < V else V for p in params]
    if min(top_k) < V:
        kth = logits.topk(max(top_k), dim=-1).values  # [B, ..., kmax], descending
        idx = torch.tensor(top_k, device=dev).view(shape).expand(*kth.shape[:-1], 1) - 1
        logits = logits.masked_fill(logits < kth.gather(-1, idx), float("-inf"))
    probs = logits.softmax(-1)
    top_p = torch.tensor([p.top_p for p in params], device=dev).view(shape)
    if bool((top_p < 1).any()):
        sp, si = probs.sort(-1)  # ascending
        drop = sp.cumsum(-1) <= 1 - top_p
        drop[..., -1] = False
        probs = probs.masked_fill(drop.scatter(-1, si, drop), 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    if bool(greedy.any()):
        onehot = torch.zeros_like(probs).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
        probs = torch.where(greedy, onehot, probs)
    return probs


def exp_noise(generators: list[torch.Generator], n: int, device) -> Tensor:
    """[B, n] Exp(1) noise, row b from generator b."""
    return torch.stack(
        [torch.empty(n, device=device).exponential_(generator=g) for g in generators]
    )


def sample_from(probs: Tensor, noise: Tensor) -> Tensor:
    """One token per row from ``probs`` [B, V] given Exp(1) ``noise`` [B, V]."""
    return (probs / noise).argmax(-1)


def sample(probs: Tensor, params: list[SamplingParams], generators: list) -> Tensor:
    """Tokens [B]: argmax for greedy rows (no randomness used), else a seeded draw."""
    out = probs.argmax(-1)
    rows = [i for i, p in enumerate(params) if not p.greedy]
    if rows:
        noise = exp_noise([generators[i] for i in rows], probs.shape[-1], probs.device)
        out[rows] = sample_from(probs[rows], noise)
    return out
