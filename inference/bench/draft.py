"""``bench_draft``: the learned draft of a target against plain decoding and the n-gram
drafter, on the held-out prompts of the draft prompt set, greedy, in-process through the
split engines (the same ``VerifyEngine``/``DraftEngine`` the workers run, without Redis).

Per held-out prompt, one stream: plain, then the learned draft, then the n-gram drafter,
interleaved so that a busy shared machine slows all three alike; then the same prompts in
batches of 8 streams. Acceptance per token (``alpha``): accepted draft tokens over draft
tokens the target judged (a position is judged when every one before it was accepted), so a
round's tokens after its first rejection do not count against it.

Pure PyTorch, no Django.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from inference.engine.checkpoints import load_checkpoint
from inference.engine.counters import SpecCounters
from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator
from inference.engine.sampling import SamplingParams
from inference.training import draft_data


@dataclass
class DraftBenchConfig:
    target: Path
    draft: Path
    k: int = 4
    max_tokens: int = 64
    n_prompts: int | None = None  # None: every held-out prompt
    streams: int = 8
    threads: int = 1


def alpha(c: SpecCounters) -> float:
    """Per-token acceptance: accepted / judged draft tokens (see the module docstring)."""
    drafted = c.num_draft_tokens_per_pos
    acc = c.num_accepted_tokens_per_pos  # shorter when the last positions never passed
    acc = acc + [0] * (len(drafted) - len(acc))
    judged = sum(
        min(drafted[i], acc[i - 1] if i else drafted[0]) if i < len(drafted) else 0
        for i in range(len(drafted))
    )
    return sum(acc) / judged if judged else 0.0


def _run(verify: VerifyEngine, draft: DraftEngine | None, prompts, params, k: int):
    gen = SpeculativeGenerator(verify, draft, k=k if draft is not None else 0)
    t0 = time.perf_counter()
    outs = gen.generate(prompts, params)
    dt = time.perf_counter() - t0
    counters = SpecCounters()
    for o in outs:
        counters.merge(o.counters)
    return [o.token_ids for o in outs], dt, counters


def run_draft_bench(cfg: DraftBenchConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    torch.set_num_threads(cfg.threads)
    torch.set_grad_enabled(False)
    target, tok = load_checkpoint(cfg.target)
    if tok is None:
        raise ValueError(f"{cfg.target} has no tokenizer.json")
    draft_model, _ = load_checkpoint(cfg.draft)
    _, held = draft_data.split(draft_data.load_prompts())
    held = held[: cfg.n_prompts] if cfg.n_prompts else held
    prompts = draft_data.encode_chat(tok, [r["prompt"] for r in held])
    params = SamplingParams(temperature=0, max_tokens=cfg.max_tokens)
    max_len = max(map(len, prompts)) + cfg.max_tokens + cfg.k + 2
    n = max(cfg.streams, 1)
    verify = VerifyEngine(target, tok, n_slots=n, max_len=max_len)

    def learned() -> DraftEngine:
        return DraftEngine.from_model(draft_model, tok, n_slots=n, max_len=max_len)

    kinds = {"plain": lambda: None, "learned": learned, "ngram": DraftEngine.ngram}
    tokens: dict[str, list[list[int]]] = {kind: [] for kind in kinds}
    seconds = dict.fromkeys(kinds, 0.0)
    counters = {kind: SpecCounters() for kind in kinds}
    for i, p in enumerate(prompts):
        for kind, make in kinds.items():
            out, dt, c = _run(verify, make(), [p], params, cfg.k)
            tokens[kind] += out
            seconds[kind] += dt
            counters[kind].merge(c)
        log(f"  prompt {i + 1}/{len(prompts)}: " + _rates(tokens, seconds))
    b8 = {kind: 0.0 for kind in ("plain", "learned")}
    b8_tokens = dict.fromkeys(b8, 0)
    for i in range(0, len(prompts) - n + 1, n):
        for kind in b8:
            out, dt, _ = _run(verify, kinds[kind](), prompts[i : i + n], params, cfg.k)
            b8[kind] += dt
            b8_tokens[kind] += sum(map(len, out))
    tps = {kind: sum(map(len, tokens[kind])) / seconds[kind] for kind in kinds}
    tps8 = {kind: b8_tokens[kind] / b8[kind] for kind in b8 if b8[kind]}
    identical = [a == b for a, b in zip(tokens["plain"], tokens["learned"], strict=True)]
    return {
        "measured": "in-process engines (VerifyEngine + DraftEngine, one process, no Redis)",
        "target": str(cfg.target),
        "draft": str(cfg.draft),
        "draft_manifest": manifest_of(cfg.draft),
        "k": cfg.k,
        "max_tokens": cfg.max_tokens,
        "heldout_prompts": len(prompts),
        "threads": cfg.threads,
        "load_average": os.getloadavg()[0],
        "alpha_learned": round(alpha(counters["learned"]), 4),
        "alpha_ngram": round(alpha(counters["ngram"]), 4),
        "acceptance_rate_learned": round(counters["learned"].acceptance_rate, 4),
        "acceptance_rate_ngram": round(counters["ngram"].acceptance_rate, 4),
        "mean_acceptance_length_learned": round(counters["learned"].mean_acceptance_length, 3),
        "tokens_per_s_b1": {kind: round(v, 2) for kind, v in tps.items()},
        "spec_vs_plain_b1": round(tps["learned"] / tps["plain"], 3),
        "ngram_vs_plain_b1": round(tps["ngram"] / tps["plain"], 3),
        "tokens_per_s_b8": {kind: round(v, 2) for kind, v in tps8.items()},
        "spec_vs_plain_b8": round(tps8["learned"] / tps8["plain"], 3) if len(tps8) == 2 else None,
        "greedy_identical": all(identical),
        "greedy_identical_per_prompt": identical,
        "ngram_greedy_identical": tokens["plain"] == tokens["ngram"],
        "draft_step_ms": round(
            1000 * counters["learned"].draft_time_s / max(counters["learned"].num_draft_steps, 1),
            2,
        ),
    }


def _rates(tokens: dict, seconds: dict) -> str:
    return ", ".join(
        f"{kind} {sum(map(len, t)) / max(seconds[kind], 1e-9):.1f} tok/s"
        for kind, t in tokens.items()
    )


def manifest_of(draft: Path) -> dict:
    path = Path(draft) / "draft.json"
    return json.loads(path.read_text()) if path.exists() else {}
