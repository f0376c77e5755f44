"""What crosses process boundaries between draft and verify workers: JSON-able messages.

Draft probabilities travel as float16 (base64). Both sides use ``draft_q(probs16)``, the
fp32-renormalized float16 distribution, and the drafter samples from exactly that, so the
rejection sampler sees the distribution the draft token really came from.
"""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

SeqId = int | str


def to_wire(q: Tensor) -> Tensor:
    return q.to(torch.float16)


def draft_q(probs16: Tensor) -> Tensor:
    q = probs16.float()
    return q / q.sum(-1, keepdim=True)


def encode_probs(t: Tensor | None) -> dict[str, Any] | None:
    if t is None:
        return None
    a = t.detach().to("cpu", torch.float16).contiguous().numpy()
    return {"dtype": "float16", "shape": list(a.shape), "b64": base64.b64encode(a.data).decode()}


def decode_probs(d: dict[str, Any] | None, device="cpu") -> Tensor | None:
    if d is None:
        return None
    a = np.frombuffer(base64.b64decode(d["b64"]), dtype=np.float16).reshape(d["shape"])
    return torch.from_numpy(a.copy()).to(device)


@dataclass
class Draft:
    seq_id: SeqId
    tokens: list[int]
    probs: Tensor | None = None  # [len(tokens), V] float16; None = one-hot (greedy, n-gram)

    def to_json(self) -> dict[str, Any]:
        return {"seq_id": self.seq_id, "tokens": self.tokens, "probs": encode_probs(self.probs)}

    @classmethod
    def from_json(cls, d: dict[str, Any], device="cpu") -> Draft:
        return cls(d["seq_id"], list(d["tokens"]), decode_probs(d.get("probs"), device))


@dataclass
class VerifyResult:
    seq_id: SeqId
    tokens: list[int]  # newly emitted: accepted drafts + correction/bonus (after stops)
    n_accepted: int = 0  # draft tokens accepted by rejection sampling
    n_drafted: int = 0  # draft tokens verified (a draft may be cut to fit limits)
    finished: bool = False
    finish_reason: str | None = None  # "stop" | "length"
    stop_reason: str | int | None = None  # the stop string or stop token id that matched
    # Only when the sequence asked (SamplingParams.logprobs / prompt_logprobs); shapes in
    # ``inference.engine.logprobs``: one entry per token of ``tokens`` / of the prompt.
    logprobs: list | None = None
    prompt_logprobs: list | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for name in ("logprobs", "prompt_logprobs"):  # absent unless asked: small messages
            if d[name] is None:
                del d[name]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> VerifyResult:
        return cls(**d)
