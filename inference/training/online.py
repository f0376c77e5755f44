"""Distil a draft on served traffic (OSD-style online distillation): the target's
distribution at every position of captured (prompt, output) pairs, by one teacher-forced
forward per pair, and the draft trained toward it with `learned_draft`'s loss.

The draft keeps its vocabulary (a draft cut from the target when there is none yet, its
vocabulary the pairs' most frequent tokens). Every ``HELDOUT_EVERY``-th pair is held out:
top-1 agreement with the target before and after goes in the manifest. The new draft is
written into ``<out>.partial`` and moved into place whole.

Pure PyTorch, no Django.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from inference.engine.checkpoints import load_checkpoint
from inference.engine.transformer import Transformer

from . import learned_draft
from .draft_data import TOP, Answer
from .self_draft import frequent_tokens, self_draft

HELDOUT_EVERY = 5


@dataclass
class OnlineRecipe:
    minutes: float = 3.0
    n_layers: int = 3  # a first draft cut from the target
    vocab: int = 4096
    max_prompt: int = 384  # the prompt's last tokens kept
    max_output: int = 128  # the output's first tokens kept
    batch: int = 8
    lr: float = 5e-4
    hard_weight: float = 0.5
    max_steps: int | None = None
    seed: int = 0


@torch.inference_mode()
def teacher_answers(target: Transformer, pairs, r: OnlineRecipe) -> list[Answer]:
    """The target's top-``TOP`` log-probabilities at each output position of each pair."""
    out = []
    for prompt, output in pairs:
        prompt, output = list(prompt)[-r.max_prompt :], list(output)[: r.max_output]
        if not prompt or not output:
            continue
        x = torch.tensor([prompt + output[:-1]])
        h = target.hidden(x)[0, len(prompt) - 1 :]
        logp = target.logits(h).float().log_softmax(-1)
        top = logp.topk(TOP, dim=-1)
        out.append(Answer(prompt, output, top.indices, top.values.to(torch.float16)))
    return out


def distil_on_pairs(
    target_dir: str | Path,
    start_dir: str | Path | None,
    pairs: list[tuple[list[int], list[int]]],
    out_dir: str | Path,
    *,
    recipe: OnlineRecipe | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """Train the draft in ``start_dir`` (None: cut one from the target) on ``pairs`` and
    save it to ``out_dir``; returns the manifest."""
    r = recipe or OnlineRecipe()
    t0, c0 = time.monotonic(), learned_draft.cpu_s()
    deadline = t0 + r.minutes * 60
    torch.manual_seed(r.seed)
    rnd = random.Random(r.seed)
    target, tok = load_checkpoint(target_dir)
    if tok is None:
        raise ValueError(f"{target_dir} has no tokenizer.json: a draft needs the target's")
    answers = teacher_answers(target, pairs, r)
    if len(answers) < 2:
        raise ValueError(f"{len(answers)} usable pairs: too few to train on")
    held = answers[::HELDOUT_EVERY]
    train = [a for i, a in enumerate(answers) if i % HELDOUT_EVERY]
    if start_dir is not None:
        student, _ = load_checkpoint(start_dir)
        student = student.float()
    else:
        eos = sorted(set(target.config.eos_token_ids))
        ids = frequent_tokens([a.tokens for a in train], r.vocab, target.config.vocab_size, eos)
        student = self_draft(target, min(r.n_layers, target.config.num_hidden_layers), ids)
    del target
    vocab_ids = getattr(student, "vocab_ids", None)
    if not isinstance(vocab_ids, torch.Tensor):
        vocab_ids = torch.arange(student.config.vocab_size)
    train_data = [learned_draft.make_example(a, vocab_ids) for a in train]
    held_data = [learned_draft.make_example(a, vocab_ids) for a in held]
    agree0 = learned_draft.agreement(student, held_data)
    student.model.embed_tokens.weight.requires_grad_(False)
    steps = learned_draft.Recipe(
        batch=r.batch, lr=r.lr, hard_weight=r.hard_weight, max_steps=r.max_steps
    )
    stats = learned_draft.distil(student, train_data, steps, deadline - 5, rnd, log)
    student.eval()
    agree = learned_draft.agreement(student, held_data)
    log(f"held-out agreement {agree0:.3f} -> {agree:.3f} ({stats['steps']} steps)")
    manifest = {
        "kind": "online-draft",
        "target": str(target_dir),
        "start": str(start_dir) if start_dir is not None else None,
        "recipe": asdict(r),
        "train_pairs": len(train),
        "heldout_pairs": len(held),
        "heldout_agreement_before": round(agree0, 4),
        "heldout_agreement": round(agree, 4),
        "train": stats,
        "timings_s": {},
    }
    learned_draft.save_draft(student, tok, Path(out_dir), manifest, t0, c0)
    return manifest
