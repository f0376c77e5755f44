"""Train a draft model for any Llama-family target, in a time budget (``manage.py train_draft``).

1. the target answers the project's prompt set (``draft_data``), keeping its distribution at
   every answer position;
2. the draft's vocabulary: the ``vocab`` most frequent tokens of those answers (FR-Spec), EOS
   always in; a reduced head keeps the target's 49k-row head from dominating a draft step;
3. the draft is cut from the target (``self_draft``: embeddings, first ``n_layers`` layers,
   final norm, the head rows of its vocabulary), so it is useful before any training;
4. distillation until the deadline: cross-entropy to the teacher's distribution restricted to
   the draft's vocabulary and renormalised (forward KL up to a constant), plus ``hard_weight``
   x cross-entropy on the teacher's argmax (greedy acceptance is argmax agreement);
   embeddings stay frozen (they are the target's, and 28M of the draft's 40M parameters);
5. held-out top-1 agreement, then a HF-format checkpoint and ``draft.json``, written into
   ``<out>.partial`` and moved into place whole: a failed or killed run leaves whatever
   draft is being served untouched.

Pure PyTorch, no Django.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from inference.engine.checkpoints import load_checkpoint, save_checkpoint
from inference.engine.transformer import Transformer

from . import draft_data
from .self_draft import frequent_tokens, self_draft
from .trainer import make_optimizer

MANIFEST = "draft.json"


@dataclass
class Recipe:
    n_layers: int = 3
    vocab: int = 4096
    max_new: int = 64
    gen_batch: int = 64  # the target's answers: 125 tokens/s at 64, 110-117 at 32 (2 cores)
    batch: int = 8  # sequences per optimizer step
    lr: float = 2e-3
    # the learning rate warms up over this share of the distillation, then falls linearly to
    # lr_floor x lr at its end (by the clock, or by max_steps when set)
    lr_warmup: float = 0.05
    lr_floor: float = 0.1
    hard_weight: float = 0.5
    minutes: float = 8.5  # the whole run: answers, training, evaluation
    gen_share: float = 0.45  # of the budget, at most, for the target's answers
    max_prompts: int | None = None  # None: every training prompt
    max_steps: int | None = None  # None: train until the deadline (tests: a few steps)
    seed: int = 0


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _batches(data: list[tuple], batch: int, rnd: random.Random):
    while True:
        order = list(range(len(data)))
        rnd.shuffle(order)
        for i in range(0, len(order) - batch + 1, batch) or [0]:
            yield [data[j] for j in order[i : i + batch]]


def _example(a: draft_data.Answer, vocab_ids: torch.Tensor) -> tuple:
    """(input ids, first predicted position, teacher idx, teacher p, hard target or -1)."""
    idx, p = draft_data.restricted_teacher(a, vocab_ids)
    top1 = a.top_ids[:, 0]
    lut = {t: i for i, t in enumerate(vocab_ids.tolist())}
    hard = torch.tensor([lut.get(int(t), -1) for t in top1])
    return a.prompt + a.tokens[:-1], len(a.prompt) - 1, idx, p, hard


def _loss(student: Transformer, rows: list[tuple], hard_weight: float):
    """Soft + hard cross-entropy over the answer positions of a batch; (loss, agreement)."""
    T = max(len(r[0]) for r in rows)
    x = torch.tensor([r[0] + [0] * (T - len(r[0])) for r in rows])
    h = student.hidden(x)
    hs = torch.cat([h[i, r[1] : r[1] + len(r[2])] for i, r in enumerate(rows)])
    logq = F.log_softmax(student.logits(hs).float(), -1)  # [n, draft vocab]
    idx = torch.cat([r[2] for r in rows])
    p = torch.cat([r[3] for r in rows])
    hard = torch.cat([r[4] for r in rows])
    soft = -(p * logq.gather(-1, idx)).sum(-1)
    keep = p.sum(-1) > 0
    loss = soft[keep].mean()
    inside = hard >= 0
    if hard_weight and bool(inside.any()):
        loss = loss + hard_weight * F.nll_loss(logq[inside], hard[inside])
    agree = (logq.argmax(-1) == hard).float().mean().item()
    return loss, agree


@torch.no_grad()
def _agreement(student: Transformer, rows: list[tuple]) -> float:
    """Top-1 agreement with the target's greedy token over all answer positions (a token
    outside the draft's vocabulary counts as a miss)."""
    hits = n = 0
    for i in range(0, len(rows), 8):
        chunk = rows[i : i + 8]
        T = max(len(r[0]) for r in chunk)
        x = torch.tensor([r[0] + [0] * (T - len(r[0])) for r in chunk])
        h = student.hidden(x)
        for j, r in enumerate(chunk):
            top = student.logits(h[j, r[1] : r[1] + len(r[2])]).argmax(-1)
            hits += int((top == r[4]).sum())
            n += len(r[4])
    return hits / max(n, 1)


def train_learned_draft(
    target_dir: str | Path,
    out_dir: str | Path,
    *,
    recipe: Recipe | None = None,
    log: Callable[[str], None] = print,
    prompts_file: Path = draft_data.PROMPTS_FILE,
) -> dict:
    """Train and save a draft for the target in ``target_dir``; returns the manifest."""
    r = recipe or Recipe()
    t0, c0 = time.monotonic(), _cpu_s()
    deadline = t0 + r.minutes * 60
    torch.manual_seed(r.seed)
    rnd = random.Random(r.seed)
    target, tok = load_checkpoint(target_dir)
    if tok is None:
        raise ValueError(f"{target_dir} has no tokenizer.json: a draft needs the target's")
    train_rows, held_rows = draft_data.split(draft_data.load_prompts(prompts_file))
    if r.max_prompts is not None:
        train_rows = train_rows[: r.max_prompts]
    held = held_rows[:8]  # generated first, with the first training batch
    texts = [x["prompt"] for x in held + train_rows]
    eos = set(target.config.eos_token_ids) | ({tok.eos_id} if tok.eos_id is not None else set())

    def progress(done: int, total: int) -> None:
        log(f"  target answers: {done}/{total} prompts ({time.monotonic() - t0:.0f} s)")

    answers = draft_data.target_answers(
        target,
        draft_data.encode_chat(tok, texts),
        max_new=r.max_new,
        batch=r.gen_batch,
        eos=eos,
        deadline=t0 + r.minutes * 60 * r.gen_share,
        on_batch=progress,
    )
    gen_s = time.monotonic() - t0
    held_ans, train_ans = answers[: len(held)], answers[len(held) :]
    if not train_ans:
        raise RuntimeError("no time left to train: raise --minutes")
    vocab_ids = frequent_tokens(
        [a.tokens for a in train_ans], r.vocab, target.config.vocab_size, sorted(eos)
    )
    coverage = _coverage(held_ans or train_ans, vocab_ids)
    log(
        f"  {len(train_ans)} answers, {sum(len(a.tokens) for a in train_ans)} tokens in "
        f"{gen_s:.0f} s; draft vocabulary {len(vocab_ids)} tokens covers {coverage:.1%} "
        "of held-out answer tokens"
    )
    student = self_draft(target, r.n_layers, vocab_ids)
    del target
    train_data = [_example(a, vocab_ids) for a in train_ans if a.tokens]
    held_data = [_example(a, vocab_ids) for a in held_ans if a.tokens]
    agree0 = _agreement(student, held_data)
    student.model.embed_tokens.weight.requires_grad_(False)
    stats = _distil(student, train_data, r, deadline - 20 - 0.02 * r.minutes * 60, rnd, log)
    student.eval()
    agree = _agreement(student, held_data)
    log(f"  held-out top-1 agreement {agree0:.3f} -> {agree:.3f} ({stats['steps']} steps)")
    manifest = {
        "kind": "learned-draft",
        "target": str(target_dir),
        "recipe": asdict(r),
        "n_layers": r.n_layers,
        "draft_vocab_size": len(vocab_ids),
        "vocab_coverage_heldout": round(coverage, 4),
        "heldout_prompts": len(held_ans),
        "train_answers": len(train_ans),
        "train_tokens": sum(len(a.tokens) for a in train_ans),
        "heldout_agreement_before": round(agree0, 4),
        "heldout_agreement": round(agree, 4),
        "train": stats,
        "timings_s": {"answers_s": round(gen_s, 1)},
    }
    _save(student, tok, Path(out_dir), manifest, t0, c0)
    return manifest


@torch.enable_grad()
def _distil(student, data, r: Recipe, deadline: float, rnd, log) -> dict:
    student.train()
    opt = make_optimizer(student, _optim(r))
    batches = _batches(data, min(r.batch, len(data)), rnd)
    t0, step, losses, agree = time.monotonic(), 0, [], []
    while (time.monotonic() < deadline or step == 0) and step != r.max_steps:
        done = (time.monotonic() - t0) / max(deadline - t0, 1e-9)
        if r.max_steps:
            done = max(done, step / r.max_steps)
        for group in opt.param_groups:
            group["lr"] = r.lr * lr_factor(done, r.lr_warmup, r.lr_floor)
        rows = next(batches)
        loss, a = _loss(student, rows, r.hard_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        agree.append(a)
        step += 1
        if step % 25 == 0:
            n = min(25, len(losses))
            log(
                f"  distil step {step}: loss {sum(losses[-n:]) / n:.3f}, "
                f"agreement {sum(agree[-n:]) / n:.3f} ({time.monotonic() - t0:.0f} s)"
            )
    n = min(25, len(losses))
    return {
        "steps": step,
        "seconds": round(time.monotonic() - t0, 1),
        "final_loss": round(sum(losses[-n:]) / n, 4),
        "final_train_agreement": round(sum(agree[-n:]) / n, 4),
    }


def lr_factor(done: float, warmup: float, floor: float) -> float:
    """The share of the peak learning rate at ``done`` (0..1) of a distillation: a linear
    warm-up, then a linear fall to ``floor``. A run ends on a clock, so its schedule is the
    clock's: at a constant rate the draft ended still far from where a decayed one lands."""
    done = min(max(done, 0.0), 1.0)
    if done < warmup:
        return (done + 1e-3) / warmup
    return floor + (1.0 - floor) * (1.0 - (done - warmup) / max(1.0 - warmup, 1e-9))


def _optim(r: Recipe):
    from .trainer import OptimConfig

    return OptimConfig(steps=1, lr=r.lr, weight_decay=0.0, bf16=False)


def _coverage(answers: list[draft_data.Answer], vocab_ids: torch.Tensor) -> float:
    allowed = set(vocab_ids.tolist())
    toks = [t for a in answers for t in a.tokens]
    return sum(t in allowed for t in toks) / max(len(toks), 1)


def _save(student, tok, out: Path, manifest: dict, t0: float, c0: float) -> None:
    """Write ``<out>.partial``, then move it into place (the old draft aside, then removed)."""
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    save_checkpoint(student, tok, partial)
    manifest["timings_s"] |= {
        "train_s": round(time.monotonic() - t0, 1),
        "cpu_s": round(_cpu_s() - c0, 1),
    }
    (partial / MANIFEST).write_text(json.dumps(manifest, indent=2))
    old = out.with_name(out.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        os.replace(out, old)
    os.replace(partial, out)
    shutil.rmtree(old, ignore_errors=True)


def draft_ready(out: str | Path) -> bool:
    """A whole draft (its manifest is written last) in ``out``."""
    out = Path(out)
    return all((out / f).exists() for f in ("config.json", "model.safetensors", MANIFEST))


# The pieces online distillation (`online.py`) shares with the first training.
cpu_s, make_example, agreement, distil, save_draft = _cpu_s, _example, _agreement, _distil, _save
