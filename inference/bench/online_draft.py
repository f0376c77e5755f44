"""``bench_draft``'s ``online_alpha_gain_rel``: a draft trained on one domain serves another
with learning on; how much does the next draft version gain on the new domain?

1. the starting draft: ``train_learned_draft`` on the ``from_domain`` prompts only;
2. traffic of ``to_domain``: the target answers training prompts of that domain greedily
   (the tokens `capture` stores for a greedy request);
3. learning: ``online.distil_on_pairs`` from the starting draft on those pairs, in
   ``learn_minutes`` (the train worker's job);
4. per-token acceptance (``draft.alpha``, greedy, k) of both drafts on held-out prompts of
   the new domain; gain = (new - start) / start; promoted when the gain clears the canary's
   default margin. ``online_s``: traffic + learning wall time (the minutes from serving the
   new domain to a candidate; the canary's own time depends on the traffic rate).

In-process engines, as ``draft.py``. Pure PyTorch, no Django.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from inference.bench.draft import alpha
from inference.engine.checkpoints import load_checkpoint
from inference.engine.counters import SpecCounters
from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator
from inference.engine.sampling import SamplingParams
from inference.training import draft_data
from inference.training.learned_draft import Recipe, draft_ready, train_learned_draft
from inference.training.online import OnlineRecipe, distil_on_pairs

PROMOTE_MARGIN = 0.05  # LearningPolicy.promote_margin's default


@dataclass
class OnlineBenchConfig:
    target: Path
    work: Path  # the drafts go here
    from_domain: str = "prose"
    to_domain: str = "code"
    start_minutes: float = 4.0
    learn_minutes: float = 6.0
    n_traffic: int = 90
    n_eval: int = 10
    max_tokens: int = 48
    k: int = 4
    threads: int = 1


def _domain_file(work: Path, domain: str) -> Path:
    rows = [r for r in draft_data.load_prompts() if r.get("domain") == domain]
    path = work / f"prompts-{domain}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _alpha(target, tok, draft_dir: Path, prompts, cfg: OnlineBenchConfig) -> tuple[float, list]:
    model, _ = load_checkpoint(draft_dir)
    max_len = max(map(len, prompts)) + cfg.max_tokens + cfg.k + 2
    verify = VerifyEngine(target, tok, n_slots=1, max_len=max_len)
    counters, outs = SpecCounters(), []
    for p in prompts:
        draft = DraftEngine.from_model(model, tok, n_slots=1, max_len=max_len)
        gen = SpeculativeGenerator(verify, draft, k=cfg.k)
        (o,) = gen.generate([p], SamplingParams(temperature=0, max_tokens=cfg.max_tokens))
        counters.merge(o.counters)
        outs.append(o.token_ids)
    return alpha(counters), outs


def run_online_bench(cfg: OnlineBenchConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    torch.set_num_threads(cfg.threads)
    cfg.work.mkdir(parents=True, exist_ok=True)
    start_dir = cfg.work / f"start-{cfg.from_domain}"
    t0 = time.monotonic()
    if not draft_ready(start_dir):
        log(f"online: training the starting draft on {cfg.from_domain} ({cfg.start_minutes} min)")
        train_learned_draft(
            cfg.target,
            start_dir,
            recipe=Recipe(minutes=cfg.start_minutes, max_new=cfg.max_tokens),
            log=log,
            prompts_file=_domain_file(cfg.work, cfg.from_domain),
        )
    start_s = time.monotonic() - t0
    torch.set_grad_enabled(False)
    target, tok = load_checkpoint(cfg.target)
    if tok is None:
        raise ValueError(f"{cfg.target} has no tokenizer.json")
    train, held = draft_data.split(
        [r for r in draft_data.load_prompts() if r.get("domain") == cfg.to_domain], every=5
    )
    traffic = draft_data.encode_chat(tok, [r["prompt"] for r in train[: cfg.n_traffic]])
    evals = draft_data.encode_chat(tok, [r["prompt"] for r in held[: cfg.n_eval]])
    eos = set(target.config.eos_token_ids) | ({tok.eos_id} if tok.eos_id is not None else set())
    t1 = time.monotonic()
    answers = draft_data.target_answers(target, traffic, max_new=cfg.max_tokens, batch=16, eos=eos)
    pairs = [(a.prompt, a.tokens) for a in answers if a.tokens]
    traffic_s = time.monotonic() - t1
    log(f"online: {len(pairs)} {cfg.to_domain} pairs served in {traffic_s:.0f} s; learning")
    torch.set_grad_enabled(True)
    new_dir = cfg.work / "online-v1"
    t2 = time.monotonic()
    manifest = distil_on_pairs(
        cfg.target,
        start_dir,
        pairs,
        new_dir,
        recipe=OnlineRecipe(minutes=cfg.learn_minutes),
        log=log,
    )
    learn_s = time.monotonic() - t2
    torch.set_grad_enabled(False)
    a0, out0 = _alpha(target, tok, start_dir, evals, cfg)
    a1, out1 = _alpha(target, tok, new_dir, evals, cfg)
    gain = (a1 - a0) / a0 if a0 else None
    log(f"online: alpha on held-out {cfg.to_domain}: {a0:.3f} -> {a1:.3f}")
    return {
        "online_alpha_gain_rel": round(gain, 4) if gain is not None else None,
        "online_alpha_start": round(a0, 4),
        "online_alpha_learned": round(a1, 4),
        "online_promoted": gain is not None and gain >= PROMOTE_MARGIN,
        "online_s": round(traffic_s + learn_s, 1),
        "online_traffic_s": round(traffic_s, 1),
        "online_learn_s": round(learn_s, 1),
        "online_start_train_s": round(start_s, 1),
        "online_pairs": len(pairs),
        "online_eval_prompts": len(evals),
        "online_greedy_identical": out0 == out1,
        "online_heldout_agreement": [
            manifest["heldout_agreement_before"],
            manifest["heldout_agreement"],
        ],
        "online_config": {k: str(v) for k, v in asdict(cfg).items()},
        "online_load_average": os.getloadavg()[0],
    }
