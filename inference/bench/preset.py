"""``bench_engine --preset``: decoding speed against the memory-bandwidth roofline, on random
weights of a real model's shape (no download), with a draft model of the same vocabulary.

Presets: ``llama-1b`` is Llama-3.2-1B's shape (1.24B parameters, tied embeddings, GQA 32/8,
llama3 rope scaling) with an 88M 4-layer draft (hidden 512, same vocabulary); ``tiny`` is a
small shape for tests and a CPU smoke run.

Figures (``--json`` keys): ``b1_plain_tok_s`` / ``b32_plain_tok_s`` (our plain greedy decode,
decoding phase); ``b1_roofline_fraction`` (over weights bytes / HBM bandwidth, where the
device's bandwidth is known); ``b1_vs_hf_compiled`` (over transformers with a static cache and
``torch.compile`` at batch 1, the same weights; None where not run); ``verify_ratio_b1`` /
``verify_ratio_b32`` (a verify step of k+1 tokens over a plain step); ``c_b1`` (draft step over
target step); ``weights_memory_ratio`` (weights in memory over the checkpoint's bytes in this
dtype, CPU kernel-layout copies included); ``graph_capture_s`` (CUDA graph captures, target
and draft); ``attention`` (the SDPA kernel each step kind runs). Steps are timed bare (one
engine step and its device-to-host read, as the engines run it) with the device synchronised.
Pure Python (no Django).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from inference.engine.config import ModelConfig
from inference.engine.engines import VerifyEngine
from inference.engine.generator import generate
from inference.engine.memory import weights_memory
from inference.engine.sampling import SamplingParams
from inference.engine.transformer import Transformer

from .spec_arithmetic import median

_LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
_LLAMA: dict[str, Any] = dict(
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    tie_word_embeddings=True,
    bos_token_id=128000,
    eos_token_id=128001,
)

PRESETS: dict[str, tuple[ModelConfig, ModelConfig]] = {
    "llama-1b": (
        ModelConfig(
            vocab_size=128256,
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=64,
            max_position_embeddings=131072,
            rope_scaling=_LLAMA3_ROPE,
            **_LLAMA,
        ),
        ModelConfig(
            vocab_size=128256,
            hidden_size=512,
            intermediate_size=2816,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=8,
            head_dim=64,
            max_position_embeddings=131072,
            rope_scaling=_LLAMA3_ROPE,
            **_LLAMA,
        ),
    ),
    "tiny": (
        ModelConfig(
            vocab_size=512,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            **_LLAMA | {"bos_token_id": 1, "eos_token_id": 2},
        ),
        ModelConfig(
            vocab_size=512,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            **_LLAMA | {"bos_token_id": 1, "eos_token_id": 2},
        ),
    ),
}

# peak memory bandwidth by device name (bytes/s): the roofline of batch-1 decoding
HBM_BYTES_PER_S = {
    "H200": 4.8e12,
    "H100 SXM": 3.35e12,
    "H100 NVL": 3.9e12,
    "H100 PCIe": 2.0e12,
    "H100": 3.35e12,
    "A100-SXM4-80GB": 2.04e12,
    "A100": 1.555e12,
    "L40S": 0.864e12,
}


def hbm_bandwidth(device: str) -> float | None:
    if torch.device(device).type != "cuda":
        return None
    name = torch.cuda.get_device_name(torch.device(device))
    return next((bw for key, bw in HBM_BYTES_PER_S.items() if key in name), None)


@dataclass
class PresetConfig:
    preset: str = "llama-1b"
    device: str = "cpu"
    dtype: str = "bfloat16"
    k: int = 4
    prompt_len: int = 128
    new_tokens: int = 128
    batches: tuple[int, int] = (1, 32)
    reps: int = 3
    step_reps: int = 20
    hf_compiled: bool | None = None  # None: on CUDA only (compiling on a CPU takes minutes)
    seed: int = 0


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def random_model(config: ModelConfig, device: str, dtype: torch.dtype, seed: int) -> Transformer:
    torch.manual_seed(seed)
    with torch.device(device):
        m = Transformer(config)  # initialised on the device, fused at construction
    return m.to(dtype).fuse_weights_().eval()


def step_ms(
    engine_model: Transformer, runner, cache, B: int, T: int, context: int, reps: int
) -> float:
    """Median ms of one decoding step of T tokens for B sequences of ``context`` cached
    tokens, as an engine runs it: the step (static/graphed path where the engine has one),
    the argmax and its one device-to-host read."""
    dev = cache.k[0].device
    slots = [cache.allocate() for _ in range(B)]
    try:
        engine_model(torch.zeros(B, context, dtype=torch.long, device=dev), cache, slots)
        x = torch.randint(3, 100, (B, T))
        ts = []
        for _ in range(reps + 3):
            _sync(dev)
            t0 = time.perf_counter()
            if runner is not None:
                logits = runner.logits(x, slots, [T] * B)
            else:
                logits = engine_model(x.to(dev), cache, slots)
            logits.argmax(-1).tolist()
            ts.append(time.perf_counter() - t0)
            for s in slots:
                cache.rollback(s, context)
        return 1e3 * median(ts[3:])
    finally:
        for s in slots:
            cache.free(s)


def attention_kernels(device: str, dtype: torch.dtype, head_dim: int) -> dict[str, str]:
    """The SDPA backend each step kind gets (the first of flash, memory-efficient, math that
    accepts it): prefill from an empty cache is causal without a mask; a static decoding or
    verify step carries a boolean length mask."""
    if torch.device(device).type != "cuda":
        return {"prefill": "cpu sdpa (causal)", "step": "cpu sdpa (length mask)"}
    q = torch.zeros(1, 8, 5, head_dim, device=device, dtype=dtype)
    kv = torch.zeros(1, 8, 256, head_dim, device=device, dtype=dtype)
    mask = torch.ones(1, 1, 5, 256, dtype=torch.bool, device=device)
    out = {}
    for kind, kw in (("prefill", {"is_causal": True}), ("step", {"attn_mask": mask})):
        for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
            try:
                with sdpa_kernel([b]):
                    qq = q if kind == "step" else kv
                    torch.nn.functional.scaled_dot_product_attention(qq, kv, kv, **kw)
                out[kind] = b.name.lower()
                break
            except RuntimeError:
                continue
    return out


def hf_compiled_decode_tok_s(
    model: Transformer, device: str, dtype: torch.dtype, prompt_len: int, n: int, log
) -> float | None:
    """transformers' LlamaForCausalLM holding the same weights, static cache + torch.compile
    (``reduce-overhead``), batch 1: decoding tok/s as (n - 1) / (t(n tokens) - t(1 token))."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**model.config.to_hf() | {"torch_dtype": str(dtype).removeprefix("torch.")})
    with torch.device(device):
        hf = LlamaForCausalLM(cfg).to(dtype)
    hf.load_state_dict(model.state_dict(), strict=False)
    hf.tie_weights()
    hf.eval()
    hf.generation_config.cache_implementation = "static"
    hf.generation_config.pad_token_id = 0
    hf.forward = torch.compile(hf.forward, mode="reduce-overhead", fullgraph=True)
    x = torch.randint(3, 100, (1, prompt_len), device=device)

    def run(m: int) -> float:
        _sync(device)
        t0 = time.perf_counter()
        hf.generate(
            input_ids=x,
            attention_mask=torch.ones_like(x),
            max_new_tokens=m,
            min_new_tokens=m,
            do_sample=False,
        )
        _sync(device)
        return time.perf_counter() - t0

    t0 = time.perf_counter()
    run(n), run(1)  # compiles (both shapes)
    log(
        "  HF static cache + torch.compile: "
        f"compiled and warmed in {time.perf_counter() - t0:.0f} s"
    )
    ts = [(run(n), run(1)) for _ in range(3)]
    return (n - 1) / median([a - b for a, b in ts])


def run_preset(
    cfg: PresetConfig,
    log: Callable[[str], None] = print,
    partial: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """The preset's figures; ``partial`` receives them before the (slow to compile) HF
    baseline runs, so a time limit that cuts that short loses only it."""
    dtype = getattr(torch, cfg.dtype)
    tcfg, dcfg = PRESETS[cfg.preset]
    grad = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    try:
        return _run(cfg, tcfg, dcfg, dtype, log, partial or (lambda r: None))
    finally:
        torch.set_grad_enabled(grad)


def _decode_tok_s(engine: VerifyEngine, B: int, cfg: PresetConfig) -> float:
    gen = torch.Generator().manual_seed(cfg.seed)
    V = engine.vocab_size
    params = SamplingParams(temperature=0.0, max_tokens=cfg.new_tokens, ignore_eos=True)
    prompts = [torch.randint(3, V, (cfg.prompt_len,), generator=gen).tolist() for _ in range(B)]
    runs = []
    for rep in range(cfg.reps + 1):
        before = engine.counters.prefill_time_s
        _sync(engine.device)
        t0 = time.perf_counter()
        outs = generate(engine, prompts, params)
        _sync(engine.device)
        dt = time.perf_counter() - t0 - (engine.counters.prefill_time_s - before)
        if rep:  # rep 0 warms up (and captures graphs)
            runs.append(sum(len(o.token_ids) - 1 for o in outs) / dt)
    return median(runs)


def _run(
    cfg: PresetConfig, tcfg: ModelConfig, dcfg: ModelConfig, dtype, log, partial
) -> dict[str, Any]:
    dev = cfg.device
    t_start = time.perf_counter()
    if torch.device(dev).type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    target = random_model(tcfg, dev, dtype, cfg.seed)
    n_params = sum(p.numel() for p in target.parameters())
    log(f"preset {cfg.preset}: target {n_params / 1e9:.3f}B parameters, {cfg.dtype} on {dev}")
    mem = weights_memory(target)
    cuda_ratio = None
    if torch.device(dev).type == "cuda":
        cuda_ratio = (torch.cuda.memory_allocated() - base) / mem["checkpoint_bytes"]
    draft = random_model(dcfg, dev, dtype, cfg.seed + 1)
    max_b = max(cfg.batches)
    max_len = cfg.prompt_len + cfg.new_tokens + cfg.k + 8
    t_engine = VerifyEngine(target, n_slots=max_b, max_len=max_len)
    d_engine = VerifyEngine(draft, n_slots=1, max_len=max_len)
    ctx = cfg.prompt_len + cfg.new_tokens // 2
    r: dict[str, Any] = {
        "preset": cfg.preset,
        "device": torch.cuda.get_device_name(torch.device(dev))
        if torch.device(dev).type == "cuda"
        else "cpu",
        "dtype": cfg.dtype,
        "target_parameters": n_params,
        "draft_parameters": sum(p.numel() for p in draft.parameters()),
        "static_graphs": t_engine.runner is not None and t_engine.runner.graphs,
        "attention": attention_kernels(dev, dtype, tcfg.head_size),
    }
    steps: dict[str, float] = {}
    for B in cfg.batches:
        log(
            f"  batch {B}: plain decoding, {cfg.prompt_len}-token prompts, "
            f"{cfg.new_tokens} new tokens"
        )
        r[f"b{B}_plain_tok_s"] = _decode_tok_s(t_engine, B, cfg)
        for T in (1, cfg.k + 1):
            steps[f"target_b{B}_T{T}_ms"] = step_ms(
                target, t_engine.runner, t_engine.cache, B, T, ctx, cfg.step_reps
            )
        r[f"verify_ratio_b{B}"] = (
            steps[f"target_b{B}_T{cfg.k + 1}_ms"] / steps[f"target_b{B}_T1_ms"]
        )
    steps["draft_b1_T1_ms"] = step_ms(
        draft, d_engine.runner, d_engine.cache, 1, 1, ctx, cfg.step_reps
    )
    b1 = min(cfg.batches)
    r[f"c_b{b1}"] = steps["draft_b1_T1_ms"] / steps[f"target_b{b1}_T1_ms"]
    r["step_ms"] = steps
    bw = hbm_bandwidth(dev)
    weight_bytes = mem["checkpoint_bytes"]
    r["hbm_bytes_per_s"] = bw
    r["roofline_tok_s"] = bw / weight_bytes if bw else None
    r[f"b{b1}_roofline_fraction"] = r[f"b{b1}_plain_tok_s"] / r["roofline_tok_s"] if bw else None
    mem = weights_memory(target)  # after use: every fused and kernel-layout weight built
    r["weights_memory"] = mem
    r["weights_memory_ratio"] = mem["ratio_with_copies"]
    r["cuda_allocated_after_load_ratio"] = cuda_ratio
    r["graph_capture_s"] = sum(
        e.runner.capture_s for e in (t_engine, d_engine) if e.runner is not None
    )
    r["graphs_captured"] = (
        len(t_engine.runner.captured) + len(d_engine.runner.captured)
        if t_engine.runner is not None and d_engine.runner is not None
        else 0
    )
    do_hf = cfg.hf_compiled if cfg.hf_compiled is not None else torch.device(dev).type == "cuda"
    r[f"b{b1}_hf_compiled_tok_s"] = r[f"b{b1}_vs_hf_compiled"] = None
    r["seconds"] = time.perf_counter() - t_start
    partial(r)
    if do_hf:
        try:
            hf = hf_compiled_decode_tok_s(target, dev, dtype, cfg.prompt_len, cfg.new_tokens, log)
            r[f"b{b1}_hf_compiled_tok_s"] = hf
            r[f"b{b1}_vs_hf_compiled"] = r[f"b{b1}_plain_tok_s"] / hf
        except Exception as e:  # report, do not lose the other figures
            log(f"  HF compiled baseline failed: {type(e).__name__}: {e}")
            r["hf_compiled_error"] = f"{type(e).__name__}: {e}"
    r["seconds"] = time.perf_counter() - t_start
    return r


def format_preset(r: dict[str, Any]) -> str:
    b = [k.removeprefix("b").removesuffix("_plain_tok_s") for k in r if k.endswith("_plain_tok_s")]
    lines = [
        f"preset {r['preset']} ({r['target_parameters'] / 1e9:.2f}B target, "
        f"{r['draft_parameters'] / 1e6:.0f}M draft), "
        f"{r['dtype']} on {r['device']}:"
    ]
    for B in b:
        lines.append(
            f"  batch {B}: plain decode {r[f'b{B}_plain_tok_s']:.1f} tok/s, "
            f"verify of k+1 / plain step {r[f'verify_ratio_b{B}']:.2f}"
        )
    b1 = b[0]
    frac, hf = r.get(f"b{b1}_roofline_fraction"), r.get(f"b{b1}_vs_hf_compiled")
    roof = r["roofline_tok_s"]
    frac_s = "-" if frac is None else f"{frac:.1%}"
    roof_s = "unknown bandwidth" if roof is None else f"{roof:.0f} tok/s"
    hf_s = "not run" if hf is None else f"{hf:.2f}x"
    c = r[f"c_b{b1}"]
    lines.append(
        f"  batch {b1}: {frac_s} of the roofline ({roof_s}); "
        f"vs HF static cache + compile: {hf_s}; c = {c:.3f}"
    )
    lines.append(
        f"  weights memory {r['weights_memory_ratio']:.3f}x the checkpoint; "
        f"CUDA graphs {r['graphs_captured']} captured in {r['graph_capture_s']:.2f} s; "
        f"attention {r['attention']}"
    )
    return "\n".join(lines)
