"""Our loader + Transformer against transformers' reference models (fp32)."""

from typing import Any

import pytest
import torch

from inference.engine.checkpoints import load_checkpoint, save_checkpoint
from inference.engine.kv_cache import KVCache
from tests.engine.helpers import tiny_model

transformers = pytest.importorskip("transformers")

BASE = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
CASES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "llama-tied-theta": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(tie_word_embeddings=True, rope_theta=500000.0),
    ),
    "llama-rope-llama3": ("LlamaConfig", "LlamaForCausalLM", dict(rope_scaling=LLAMA3)),
    "llama-rope-linear": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(rope_scaling={"rope_type": "linear", "factor": 4.0}),
    ),
    "llama-bias-mha": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(attention_bias=True, num_key_value_heads=4),
    ),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=True)),
}


def _hf_checkpoint(tmp_path, case):
    cfg_cls, model_cls, extra = CASES[case]
    torch.manual_seed(0)
    cfg = getattr(transformers, cfg_cls)(**(BASE | extra))
    hf = getattr(transformers, model_cls)(cfg).eval()
    with torch.no_grad():  # non-trivial biases and norms
        for n, p in hf.named_parameters():
            if n.endswith("bias") or "norm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    hf.save_pretrained(tmp_path)
    return hf


@pytest.mark.parametrize("case", list(CASES))
@torch.no_grad()
def test_logits_match_transformers(tmp_path, case):
    hf = _hf_checkpoint(tmp_path, case)
    model, _ = load_checkpoint(tmp_path)
    x = torch.randint(0, 96, (3, 40))
    ref = hf(x).logits
    assert (model(x) - ref).abs().max() <= 1e-4

    # incremental, batched, different lengths: prefill 5/17/30 (padded), then chunks of 1..4
    cache = KVCache.for_model(model, n_slots=4, max_len=64)
    cache.allocate()  # slot 0 stays busy: rows use slots 1..3
    slots = torch.tensor([cache.allocate() for _ in range(3)])
    lens = torch.tensor([5, 17, 30])
    out = model(x[:, :30], cache, slots, lens)
    for b in range(3):
        assert (out[b, : lens[b]] - ref[b, : lens[b]]).abs().max() <= 1e-4
    step = 0
    while (lens < 40).any():
        n = torch.clamp(40 - lens, max=1 + step % 4)
        T = int(n.max())
        toks = torch.stack(
            [
                torch.nn.functional.pad(x[b, lens[b] : lens[b] + n[b]], (0, T - int(n[b])))
                for b in range(3)
            ]
        )
        out = model(toks, cache, slots, n)
        for b in range(3):
            if n[b]:
                assert (out[b, : n[b]] - ref[b, lens[b] : lens[b] + n[b]]).abs().max() <= 1e-4
        lens += n
        step += 1
    assert cache.lengths[slots].tolist() == [40, 40, 40]


@torch.no_grad()
def test_save_checkpoint_loads_in_transformers(tmp_path, tokenizer):
    for tie in (False, True):
        model = tiny_model(
            tie_word_embeddings=tie, rope_scaling=LLAMA3, bos_token_id=0, eos_token_id=1
        )
        save_checkpoint(model, tokenizer, tmp_path / str(tie))
        hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / str(tie)).eval()
        assert type(hf).__name__ == "LlamaForCausalLM"
        x = torch.randint(0, 64, (2, 20))
        assert (model(x) - hf(x).logits).abs().max() <= 1e-4
        again, tok = load_checkpoint(tmp_path / str(tie))
        assert tok is not None
        assert torch.equal(again(x), model(x))
        assert tok.hash == tokenizer.hash and tok.eos_id == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@torch.no_grad()
def test_dtypes_run(dtype):
    model = tiny_model().to(dtype)
    cache = KVCache.for_model(model, 2, 32)
    s = torch.tensor([cache.allocate(), cache.allocate()])
    out = model(torch.randint(0, 64, (2, 6)), cache, s, torch.tensor([6, 3]))
    assert out.dtype == dtype and torch.isfinite(out).all()
