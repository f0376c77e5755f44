"""Step-time curves for the planner: verify (target) time vs batch size and k, with random
weights of a named shape. ``python -m inference.bench.step_curves --shape smollm2-135m``."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch
from torch import Tensor

from inference.engine.config import ModelConfig
from inference.engine.engines import VerifyEngine
from inference.engine.messages import SeqId
from inference.engine.sampling import SamplingParams
from inference.engine.transformer import Transformer

SHAPES: dict[str, dict[str, Any]] = {
    "tiny": dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    "smollm2-135m": dict(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        tie_word_embeddings=True,
        rope_theta=100000.0,
    ),
    "smollm2-1.7b": dict(
        vocab_size=49152,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=24,
        num_attention_heads=32,
        num_key_value_heads=32,
        tie_word_embeddings=True,
        rope_theta=130000.0,
    ),
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def bench_verify(model: Transformer, batch_sizes, ks, prompt_len: int = 128, iters: int = 5):
    """Mean seconds of one ``VerifyEngine.verify`` call (one forward + rejection sampling)."""
    device = next(model.parameters()).device
    V, rows = model.config.vocab_size, []
    for B in batch_sizes:
        for k in ks:
            eng = VerifyEngine(model, n_slots=B, max_len=prompt_len + (iters + 2) * (k + 1) + 1)
            params = SamplingParams(temperature=0, max_tokens=10**6, ignore_eos=True)
            prompts = torch.randint(0, V, (B, prompt_len)).tolist()
            eng.add_many([(i, p, params) for i, p in enumerate(prompts)])
            drafts: list[list[tuple[SeqId, list[int], Tensor | None]]] = [
                [(i, d, None) for i, d in enumerate(torch.randint(0, V, (B, k)).tolist())]
                for _ in range(iters + 1)
            ]
            eng.verify(drafts[-1])  # warm-up
            _sync(device)
            t0 = time.perf_counter()
            for d in drafts[:iters]:
                eng.verify(d)
            _sync(device)
            rows.append({"batch": B, "k": k, "verify_s": (time.perf_counter() - t0) / iters})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch", default="1,8,32")
    ap.add_argument("--k", default="0,2,4,8")
    a = ap.parse_args()
    torch.manual_seed(0)
    with torch.device(a.device):
        model = Transformer(ModelConfig(**SHAPES[a.shape])).to(getattr(torch, a.dtype)).eval()
    for row in bench_verify(model, map(int, a.batch.split(",")), [int(k) for k in a.k.split(",")]):
        print(json.dumps({"shape": a.shape, "device": a.device, "dtype": a.dtype} | row))


if __name__ == "__main__":
    main()
