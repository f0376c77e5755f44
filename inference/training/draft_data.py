"""The data a learned draft is distilled on: the project's prompt set and the target's own
greedy answers to it, with the target's distribution at every answer position.

The prompts (``data/draft_prompts.jsonl``: 1,200 of prose, code, Q&A and chat, written for
this project from topics and phrasings in four domains; the first 400 were the set until
session 17, and hold the benchmark's held-out prompts) are rendered with the target's chat
template, as requests are served. The target answers them greedily, a batch at a time
through the engine's KV cache; each step's logits are the teacher's distribution for that
position, kept as its top ``TOP`` log-probabilities (the rest of the mass is negligible for
a draft's purposes), so no second teacher pass is needed. Every ``HELDOUT_EVERY``-th prompt
is held out for evaluation and the benchmark. The target answers them in file order until
its share of the training's budget is spent: a faster machine trains on more prompts (a
draft's held-out agreement grew with its answers: 0.40 on 180 prompts, 0.435 on 360, at
equal training time).

Pure PyTorch, no Django.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from inference.engine.kv_cache import KVCache
from inference.engine.transformer import Transformer, right_pad
from inference.text.tokenizer import Tokenizer

PROMPTS_FILE = Path(__file__).parent / "data" / "draft_prompts.jsonl"
HELDOUT_EVERY = 10
TOP = 32


def load_prompts(path: Path = PROMPTS_FILE) -> list[dict]:
    """[{"domain": ..., "prompt": ...}] in file order."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    bad = [i for i, r in enumerate(rows) if not isinstance(r.get("prompt"), str)]
    if bad:
        raise ValueError(f"{path}: rows {bad[:5]} have no prompt")
    return rows


def split(rows: list[dict], every: int = HELDOUT_EVERY) -> tuple[list[dict], list[dict]]:
    """(training, held out): every ``every``-th row is held out."""
    return (
        [r for i, r in enumerate(rows) if i % every],
        [r for i, r in enumerate(rows) if i % every == 0],
    )


def encode_chat(tok: Tokenizer, prompts: list[str]) -> list[list[int]]:
    """Each prompt as one user turn in the target's chat template, assistant turn opened."""
    return [tok.encode(tok.chat_prompt([{"role": "user", "content": p}])) for p in prompts]


@dataclass
class Answer:
    prompt: list[int]
    tokens: list[int]  # the target's greedy answer (through its first EOS, if any)
    top_ids: Tensor  # [len(tokens), TOP] the teacher's likeliest ids at each answer position
    top_logp: Tensor  # [len(tokens), TOP] float16 their log-probabilities


@torch.inference_mode()
def target_answers(
    target: Transformer,
    prompts: list[list[int]],
    *,
    max_new: int,
    batch: int = 32,
    eos: Collection[int] = frozenset(),
    deadline: float | None = None,
    on_batch=None,
) -> list[Answer]:
    """Greedy answers of ``target`` to ``prompts`` with its top-``TOP`` log-probabilities at
    every answer position; stops starting new batches past ``deadline`` (monotonic)."""
    out: list[Answer] = []
    for b0 in range(0, len(prompts), batch):
        if deadline is not None and out and time.monotonic() > deadline:
            break
        chunk = prompts[b0 : b0 + batch]
        cache = KVCache.for_model(target, len(chunk), max(map(len, chunk)) + max_new + 1)
        slots = [cache.allocate() for _ in chunk]
        x, n = right_pad(chunk)
        h = target.hidden(x, cache, slots, n)
        logits = target.logits(h[torch.arange(len(chunk)), n - 1])
        toks, tops, logps = [], [], []
        done = torch.zeros(len(chunk), dtype=torch.bool)
        for _ in range(max_new):
            logp = logits.float().log_softmax(-1)
            top = logp.topk(TOP, dim=-1)
            nxt = logits.argmax(-1)
            toks.append(nxt)
            tops.append(top.indices)
            logps.append(top.values.to(torch.float16))
            done |= torch.tensor([int(t) in eos for t in nxt.tolist()])
            if bool(done.all()):
                break
            logits = target(nxt[:, None], cache, slots)[:, 0]
        T = torch.stack(toks, 1)
        top_i, top_l = torch.stack(tops, 1), torch.stack(logps, 1)
        for i, p in enumerate(chunk):
            row = T[i].tolist()
            end = next((j + 1 for j, t in enumerate(row) if t in eos), len(row))
            out.append(Answer(list(p), row[:end], top_i[i, :end].clone(), top_l[i, :end].clone()))
        if on_batch is not None:
            on_batch(len(out), len(prompts))
    return out


def restricted_teacher(answer: Answer, vocab_ids: Tensor) -> tuple[Tensor, Tensor]:
    """The teacher's distribution at each answer position restricted to the draft's
    vocabulary and renormalised, as (index into vocab_ids [n, TOP], prob [n, TOP]) with
    zeros for entries outside it; and positions where nothing of the top falls inside get
    all-zero rows (the caller masks them)."""
    size = int(max(vocab_ids.max(), answer.top_ids.max())) + 1
    lut = torch.full((size,), -1, dtype=torch.long)
    lut[vocab_ids] = torch.arange(len(vocab_ids))
    idx = lut[answer.top_ids]  # -1 outside the draft's vocabulary
    p = answer.top_logp.float().exp() * (idx >= 0)
    s = p.sum(-1, keepdim=True)
    return idx.clamp(min=0), torch.where(s > 0, p / s.clamp(min=1e-30), p)
