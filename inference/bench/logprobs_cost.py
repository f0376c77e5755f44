"""What target logprobs cost the verifier, measured side by side in one run.

A verify step (B sequences, k draft tokens each, greedy) of one engine, rounds interleaved:
no sequence asks for logprobs; every sequence asks for 5 alternatives; one sequence asks.
And a prefill of B prompts with and without prompt logprobs (what `echo` + `logprobs`
costs). Medians and minima of the step times (on a shared, noisy machine the minimum is
the steadier figure); ratios to the plain step.

    python -m inference.bench.logprobs_cost [--model data/models/demo-target] [--vocab N]

Without --model a random model of the demo target's shape is used; --vocab sets its
vocabulary (a large one, like SmolLM2's 49,152, shows the head's share).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import time

import torch

from inference.engine.engines import VerifyEngine
from inference.engine.sampling import SamplingParams


def _model(path: str | None, vocab: int):
    if path:
        from inference.engine.checkpoints import load_checkpoint

        return load_checkpoint(path)[0]
    from inference.engine.config import ModelConfig
    from inference.engine.transformer import Transformer

    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=vocab,
        hidden_size=384,
        intermediate_size=1024,
        num_hidden_layers=6,
        num_attention_heads=6,
        num_key_value_heads=6,
        max_position_embeddings=1024,
    )
    return Transformer(cfg).eval()


@torch.no_grad()
def run(*, model, batch: int, k: int, rounds: int, prompt_len: int) -> dict:
    V = model.config.vocab_size
    rng = random.Random(0)
    prompts = [[rng.randrange(V) for _ in range(prompt_len)] for _ in range(batch)]
    cases = {
        "off": lambda i: None,
        "all_top5": lambda i: 5,
        "one_top5": lambda i: 5 if i == 0 else None,
    }
    # ONE engine whose sequences change what they ask for from round to round (separate
    # engines differ by more than the effect: memory placement): rounds rotate the cases
    e = VerifyEngine(model, n_slots=batch, max_len=prompt_len + (k + 1) * (3 * rounds + 2) + 1)
    e.add_many(
        [(i, p, SamplingParams(temperature=0, max_tokens=10_000)) for i, p in enumerate(prompts)]
    )
    times: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(rounds):
        order = list(cases)[r % 3 :] + list(cases)[: r % 3]  # rotate: no case always first
        for name in order:
            for i, seq in e.seqs.items():  # the bench's knob: what each sequence asks for
                seq.params = dataclasses.replace(seq.params, logprobs=cases[name](i))
            drafts = [[rng.randrange(V) for _ in range(k)] for _ in range(batch)]
            t0 = time.perf_counter()
            e.verify([(i, drafts[i], None) for i in range(batch)])
            times[name].append(time.perf_counter() - t0)
    verify = {name: statistics.median(ts) * 1000 for name, ts in times.items()}
    verify_min = {name: min(ts) * 1000 for name, ts in times.items()}
    prefill: dict[str, list[float]] = {"plain": [], "prompt_logprobs_top1": []}
    for r in range(max(3, rounds // 4)):
        for name in prefill if r % 2 == 0 else reversed(list(prefill)):
            e = VerifyEngine(model, n_slots=batch, max_len=prompt_len + 2)
            pl = 1 if name != "plain" else None
            items: list = [
                (i, p, SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=pl))
                for i, p in enumerate(prompts)
            ]
            t0 = time.perf_counter()
            e.add_many(items)
            prefill[name].append(time.perf_counter() - t0)
    pre = {name: statistics.median(ts) * 1000 for name, ts in prefill.items()}
    pre_min = {name: min(ts) * 1000 for name, ts in prefill.items()}
    return {
        "vocab_size": V,
        "batch": batch,
        "k": k,
        "prompt_len": prompt_len,
        "verify_step_ms": verify,
        "verify_ratio_all_top5": verify["all_top5"] / verify["off"],
        "verify_ratio_one_top5": verify["one_top5"] / verify["off"],
        "verify_step_min_ms": verify_min,
        "verify_min_ratio_all_top5": verify_min["all_top5"] / verify_min["off"],
        "verify_min_ratio_one_top5": verify_min["one_top5"] / verify_min["off"],
        "prefill_ms": pre,
        "prefill_ratio_prompt_logprobs": pre["prompt_logprobs_top1"] / pre["plain"],
        "prefill_min_ms": pre_min,
        "prefill_min_ratio_prompt_logprobs": pre_min["prompt_logprobs_top1"] / pre_min["plain"],
        "threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--vocab", type=int, default=259)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    a = ap.parse_args(argv)
    torch.set_grad_enabled(False)
    if a.threads:
        torch.set_num_threads(a.threads)
    model = _model(a.model, a.vocab)
    out = run(model=model, batch=a.batch, k=a.k, rounds=a.rounds, prompt_len=a.prompt_len)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
