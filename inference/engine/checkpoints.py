"""Checkpoints: Hugging Face safetensors directories in and out.

``save_checkpoint`` writes what ``LlamaForCausalLM.from_pretrained`` reads (config.json,
model.safetensors, tokenizer.json); ``load_checkpoint`` reads any such directory (single or
sharded safetensors). GGUF files live in ``gguf_file``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from inference.text.tokenizer import Tokenizer

from .config import ModelConfig
from .transformer import Transformer, rope_inv_freq

_IGNORED = ("rotary_emb.inv_freq",)


def read_safetensors_dir(path: str | Path) -> dict[str, torch.Tensor]:
    path = Path(path)
    index = path / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        sd.update(load_file(str(path / f)))
    return {k: v for k, v in sd.items() if not k.endswith(_IGNORED)}


def build_model(
    config: ModelConfig,
    state_dict: dict[str, torch.Tensor],
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Transformer:
    """A Transformer holding ``state_dict`` (HF names), without a throwaway random init."""
    with torch.device("meta"):
        model = Transformer(config)
    sd = {  # integer buffers (a reduced head's vocab_ids) keep their dtype
        k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype)
        for k, v in state_dict.items()
    }
    if config.tie_word_embeddings:
        sd.setdefault("lm_head.weight", sd["model.embed_tokens.weight"])
    model.load_state_dict(sd, strict=True, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.register_buffer("inv_freq", rope_inv_freq(config).to(device), persistent=False)
    del sd  # the loaded tensors live on as parameters; fusing then frees the separate ones
    return model.fuse_weights_().eval()


def load_checkpoint(
    path: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> tuple[Transformer, Tokenizer | None]:
    path = Path(path)
    config = ModelConfig.from_file(path)
    model = build_model(config, read_safetensors_dir(path), device, dtype)
    tok = Tokenizer.from_dir(path) if (path / "tokenizer.json").exists() else None
    return model, tok


def save_checkpoint(model: Transformer, tokenizer: Tokenizer | None, path: str | Path) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = model.config.to_hf()
    cfg["torch_dtype"] = str(next(model.parameters()).dtype).removeprefix("torch.")
    if tokenizer is not None:
        if cfg["bos_token_id"] is None:
            cfg["bos_token_id"] = tokenizer.bos_id
        if cfg["eos_token_id"] is None:
            cfg["eos_token_id"] = tokenizer.eos_id
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    sd = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    save_file(sd, str(path / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save(path)
    return path
