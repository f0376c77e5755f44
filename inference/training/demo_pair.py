"""Train the demo target/draft pair on the Python standard library's sources.

1. a byte-level tokenizer (``byte_tokenizer``), shared byte-for-byte by both models;
2. the target: a small Llama trained with next-token cross-entropy;
3. the draft: a much shallower Llama distilled from the target (forward KL to the
   target's distributions) on real text *and* on the target's own greedy continuations,
   which is exactly the text it has to predict during speculative decoding;
4. held-out evaluation: greedy acceptance at k on held-out prompts, bits per byte;
5. HF-format checkpoints + ``demo_pair.json`` manifest.

Pure PyTorch, seeded, no Django.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from inference.engine.checkpoints import save_checkpoint
from inference.engine.config import ModelConfig
from inference.engine.transformer import Transformer
from inference.text.tokenizer import Tokenizer

from . import byte_tokenizer as bt
from .acceptance import greedy_acceptance, teacher_forced_agreement
from .corpus import Corpus, WindowSampler, heldout_prompts, load_corpus
from .fastgen import lockstep_greedy
from .trainer import OptimConfig, bf16_supported, distill, eval_loss, teacher_logprobs, train_lm

TARGET_NAME, DRAFT_NAME, MANIFEST = "demo-target", "demo-draft", "demo_pair.json"


@dataclass
class Arch:
    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int | None = None

    def model_config(self, max_pos: int) -> ModelConfig:
        return ModelConfig(
            vocab_size=bt.VOCAB_SIZE,
            max_position_embeddings=max_pos,
            bos_token_id=bt.BOS_ID,
            eos_token_id=bt.EOS_ID,
            tie_word_embeddings=False,
            model_type="llama",
            **asdict(self),
        )


@dataclass
class PairPreset:
    target: Arch
    draft: Arch
    max_position_embeddings: int = 1024
    # target training: steps x batch_size x seq_len tokens
    seq_len: int = 256
    batch_size: int = 16
    target_optim: OptimConfig = field(
        default_factory=lambda: OptimConfig(steps=180, lr=2e-3, warmup=15)
    )
    # draft distillation
    draft_seq_len: int = 256
    draft_real_batch: int = 4  # windows of real text per step (teacher labels on the fly)
    draft_gen_batch: int = 12  # target-generated sequences per step (from a fixed pool)
    gen_pool: int = 256  # target greedy continuations generated for distillation
    gen_prompt_len: int = 64
    draft_optim: OptimConfig = field(
        default_factory=lambda: OptimConfig(steps=300, lr=3e-3, warmup=15)
    )
    hard_weight: float = 0.5
    draft_init_from_target: bool = False  # copy embeddings/head when the widths match
    # held-out evaluation
    k: int = 4
    eval_prompts: int = 32
    eval_prompt_len: int = 128
    eval_new: int = 128
    eval_loss_batches: int = 4


PRESETS: dict[str, PairPreset] = {
    # ~8 min on 2 CPU cores (AVX-512 BF16).
    "demo": PairPreset(
        target=Arch(384, 6, 1024, 6),
        draft=Arch(128, 2, 384, 4),
    ),
    # seconds: tests and smoke runs, same code path
    "tiny": PairPreset(
        target=Arch(32, 2, 64, 2),
        draft=Arch(16, 1, 32, 2),
        max_position_embeddings=128,
        seq_len=32,
        batch_size=2,
        target_optim=OptimConfig(steps=3, warmup=1),
        draft_seq_len=32,
        draft_real_batch=2,
        draft_gen_batch=2,
        gen_pool=2,
        gen_prompt_len=8,
        draft_optim=OptimConfig(steps=3, warmup=1),
        eval_prompts=2,
        eval_prompt_len=16,
        eval_new=16,
        eval_loss_batches=1,
    ),
}


class Progress:
    """Minimal progress interface: ``total`` units, ``advance(n, **postfix)``."""

    def __init__(self, total: int) -> None:
        self.total = total

    def advance(self, n: int = 1, desc: str | None = None, **postfix) -> None:  # noqa: B027
        pass

    def close(self) -> None:  # noqa: B027
        pass


class TqdmProgress(Progress):
    def __init__(self, total: int, **kw) -> None:
        from tqdm import tqdm

        super().__init__(total)
        self.bar = tqdm(total=total, unit="step", dynamic_ncols=True, **kw)

    def advance(self, n: int = 1, desc: str | None = None, **postfix) -> None:
        if desc:
            self.bar.set_description(desc, refresh=False)
        if postfix:
            self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


def total_units(p: PairPreset) -> int:
    # one unit per optimizer step, plus one each for: corpus, generation, eval, save
    return p.target_optim.steps + p.draft_optim.steps + 4


def pair_paths(out: str | Path) -> tuple[Path, Path, Path]:
    out = Path(out)
    return out / TARGET_NAME, out / DRAFT_NAME, out / MANIFEST


def pair_exists(out: str | Path) -> bool:
    t, d, m = pair_paths(out)
    return all((p / "model.safetensors").exists() for p in (t, d)) and m.exists()


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def train_demo_pair(
    out: str | Path,
    *,
    seed: int = 0,
    preset: str | PairPreset = "demo",
    threads: int | None = None,
    progress: Progress | None = None,
    corpus: Corpus | None = None,
    log: Callable[[str], None] = lambda s: None,
) -> dict:
    """Train and write the pair into ``out``/demo-target, ``out``/demo-draft; returns the
    manifest (also written to ``out``/demo_pair.json)."""
    p = PRESETS[preset] if isinstance(preset, str) else preset
    t_start, cpu_start = time.perf_counter(), time.process_time()
    threads = threads or max(1, len(os.sched_getaffinity(0)))
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    progress = progress or Progress(total_units(p))
    use_bf16 = p.target_optim.bf16 and bf16_supported()
    t_opt = replace(p.target_optim, bf16=use_bf16)
    d_opt = replace(p.draft_optim, bf16=use_bf16)
    timings: dict[str, float] = {}
    try:
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        corpus = corpus or load_corpus()
        tk = bt.build_byte_tokenizer()
        tokenizer = Tokenizer(tk, bos_token=bt.BOS, eos_token=bt.EOS)
        timings["corpus_s"] = time.perf_counter() - t0
        progress.advance(1, desc="corpus")

        # -- target ------------------------------------------------------------------
        target = Transformer(p.target.model_config(p.max_position_embeddings))
        sampler = WindowSampler(corpus.train.data, p.seq_len, p.batch_size, seed)

        def t_hook(step: int, info: dict) -> None:
            progress.advance(1, desc="target", loss=f"{info['loss']:.3f}")

        t_stats = train_lm(target, sampler.batch, t_opt, t_hook)
        timings["target_s"] = t_stats["seconds"]
        stage = Path(out) / ".demo_pair.partial"  # complete pairs only ever appear in `out`
        if stage.exists():
            shutil.rmtree(stage)
        s_target, s_draft, s_manifest = pair_paths(stage)
        save_checkpoint(target, tokenizer, s_target)  # kept if a later stage fails
        _finish_checkpoint_dir(s_target)

        t0 = time.perf_counter()
        pool = build_pool(target, corpus, p, seed, use_bf16)
        timings["generate_s"] = time.perf_counter() - t0
        progress.advance(1, desc="generate")

        def d_hook(step: int, info: dict) -> None:
            progress.advance(1, desc="draft", kl=f"{info['kl']:.3f}", agree=f"{info['agree']:.2f}")

        draft, d_stats = train_draft(target, pool, corpus, p, seed, d_opt, d_hook)
        timings["draft_s"] = d_stats["seconds"]

        t0 = time.perf_counter()
        ev = evaluate(target, draft, corpus, p, seed)
        acc = ev["greedy"]
        timings["eval_s"] = time.perf_counter() - t0
        progress.advance(1, desc="eval", acc=f"{acc['acceptance_rate']:.2f}")

        # -- write ---------------------------------------------------------------------
        save_checkpoint(draft, tokenizer, s_draft)
        _finish_checkpoint_dir(s_draft)
        tok_hash = bt.file_sha256(s_target / "tokenizer.json")
        assert tok_hash == bt.file_sha256(s_draft / "tokenizer.json")
        progress.advance(1, desc="saved")
        timings["total_s"] = time.perf_counter() - t_start
        # CPU seconds of this process: wall time / threads on an idle machine; shows how
        # much of total_s was lost to other processes on a shared one
        timings["cpu_s"] = time.process_time() - cpu_start
        manifest = {
            "format": 1,
            "seed": seed,
            "preset": preset if isinstance(preset, str) else "custom",
            "threads": threads,
            "bf16_autocast": use_bf16,
            "created_unix": int(time.time()),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "corpus": corpus.describe(),
            "tokenizer": {
                "kind": "byte-level",
                "vocab_size": bt.VOCAB_SIZE,
                "specials": {"bos": bt.BOS_ID, "eos": bt.EOS_ID, "pad": bt.PAD_ID},
                "tokenizer_json_sha256": tok_hash,
                "tokenizer_hash": tokenizer.hash,
            },
            "target": {
                "path": TARGET_NAME,
                "params": _count(target),
                "arch": asdict(p.target),
                "seq_len": p.seq_len,
                "batch_size": p.batch_size,
                "optim": t_opt.to_dict(),
                "train": t_stats,
                "heldout_bits_per_byte": ev["target_bits_per_byte"],
            },
            "draft": {
                "path": DRAFT_NAME,
                "params": _count(draft),
                "arch": asdict(p.draft),
                "distillation": {
                    "teacher": TARGET_NAME,
                    "loss": "forward KL to teacher + hard_weight * CE(teacher argmax)",
                    "hard_weight": p.hard_weight,
                    "real_windows_per_step": p.draft_real_batch,
                    "generated_per_step": p.draft_gen_batch,
                    "generated_pool": p.gen_pool,
                    "seq_len": p.draft_seq_len,
                },
                "optim": d_opt.to_dict(),
                "train": d_stats,
                "heldout_bits_per_byte": ev["draft_bits_per_byte"],
            },
            "heldout": {
                "greedy": acc,
                "teacher_forced_argmax_agreement": ev["teacher_forced_argmax_agreement"],
            },
            "train_seconds": round(timings["target_s"] + timings["draft_s"], 1),
            "timings_s": {k: round(v, 1) for k, v in timings.items()},
        }
        s_manifest.write_text(json.dumps(manifest, indent=2) + "\n")
        t_dir, d_dir, m_path = pair_paths(out)
        for src, dst in ((s_target, t_dir), (s_draft, d_dir), (s_manifest, m_path)):
            if dst.is_dir():
                shutil.rmtree(dst)
            src.replace(dst)
        stage.rmdir()
        log(f"wrote {t_dir}, {d_dir}, {m_path}")
        return manifest
    finally:
        torch.set_num_threads(prev_threads)
        progress.close()


def build_pool(target, corpus: Corpus, p: PairPreset, seed: int, bf16: bool):
    """Distillation data: the target's greedy continuations of training-text prompts, and
    the target's log-probabilities over them (computed once, reused every epoch)."""
    gen_new = p.draft_seq_len + 1 - p.gen_prompt_len
    prompts = WindowSampler(corpus.train.data, p.gen_prompt_len - 1, p.gen_pool, seed + 1).batch()
    pool = lockstep_greedy(target, prompts, gen_new)[:, :-1].contiguous()  # [N, draft_seq_len]
    return pool, teacher_logprobs(target, pool, bf16)


def train_draft(
    target, pool, corpus: Corpus, p: PairPreset, seed: int, opt: OptimConfig, hook=None
):
    """Distil a draft from ``target``: each step mixes fresh real-text windows (teacher
    labels computed on the fly) with sequences from the generated pool."""
    pool_in, pool_lp = pool
    torch.manual_seed(seed + 5)
    draft = Transformer(p.draft.model_config(p.max_position_embeddings))
    if p.draft_init_from_target and p.draft.hidden_size == p.target.hidden_size:
        with torch.no_grad():
            draft.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
            draft.lm_head.weight.copy_(target.lm_head.weight)
            draft.model.norm.weight.copy_(target.model.norm.weight)
    real = WindowSampler(corpus.train.data, p.draft_seq_len - 1, p.draft_real_batch, seed + 2)
    pick = torch.Generator().manual_seed(seed + 3)

    def next_batch():
        parts_in, parts_lp = [], []
        if p.draft_real_batch:
            x = real.batch()
            parts_in.append(x)
            parts_lp.append(teacher_logprobs(target, x, opt.bf16))
        if p.draft_gen_batch:
            idx = torch.randint(0, pool_in.shape[0], (p.draft_gen_batch,), generator=pick)
            parts_in.append(pool_in[idx])
            parts_lp.append(pool_lp[idx])
        return torch.cat(parts_in), torch.cat(parts_lp)

    stats = distill(draft, next_batch, opt, hook, hard_weight=p.hard_weight)
    return draft, stats


def evaluate(target, draft, corpus: Corpus, p: PairPreset, seed: int) -> dict:
    """Held-out figures: greedy acceptance at k on the target's continuations of held-out
    prompts (exact replay of the engine's rounds), bits per byte, argmax agreement."""
    prompts = torch.tensor(heldout_prompts(corpus, p.eval_prompts, p.eval_prompt_len, seed))
    acc = greedy_acceptance(target, draft, prompts, p.eval_new, k=p.k)
    hs = WindowSampler(corpus.heldout.data, p.seq_len, 4, seed + 4)
    batches = [hs.batch() for _ in range(p.eval_loss_batches)]
    agree = sum(teacher_forced_agreement(target, draft, b[:, :-1]) for b in batches) / len(batches)
    ln2 = 0.6931471805599453
    return {
        "greedy": {
            **acc.to_dict(),
            "prompts": p.eval_prompts,
            "prompt_len": p.eval_prompt_len,
            "new_tokens": p.eval_new,
        },
        "target_bits_per_byte": round(eval_loss(target, batches) / ln2, 4),
        "draft_bits_per_byte": round(eval_loss(draft, batches) / ln2, 4),
        "teacher_forced_argmax_agreement": round(agree, 4),
    }


def _finish_checkpoint_dir(d: Path) -> None:
    """Add what the engine's writer leaves out: pad ids and the full tokenizer config
    (identical bytes in both directories), and a generation config."""
    cfg_path = d / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["pad_token_id"] = bt.PAD_ID
    cfg["model_type"] = "llama"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    (d / "tokenizer_config.json").write_text(json.dumps(bt.tokenizer_config(), indent=2) + "\n")
    (d / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": bt.BOS, "eos_token": bt.EOS, "pad_token": bt.PAD}, indent=2) + "\n"
    )
    gen = {"bos_token_id": bt.BOS_ID, "eos_token_id": bt.EOS_ID, "pad_token_id": bt.PAD_ID}
    (d / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:  # python -m inference.training.demo_pair OUT
    argv = sys.argv[1:] if argv is None else argv
    out = argv[0] if argv else "data/models"
    preset = argv[1] if len(argv) > 1 else "demo"
    m = train_demo_pair(out, preset=preset, progress=TqdmProgress(total_units(PRESETS[preset])))
    print(json.dumps(m["heldout"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
