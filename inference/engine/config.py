"""ModelConfig: the subset of a Hugging Face ``config.json`` a Llama-family decoder needs."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SUPPORTED_MODEL_TYPES = {"llama", "qwen2", "mistral"}
ROPE_TYPES = {"default", "linear", "llama3"}


@dataclass
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    attention_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    model_type: str = "llama"
    # A draft model's reduced head (FR-Spec): logits over these many target token ids only,
    # listed in the checkpoint's ``vocab_ids``; the distribution is zero elsewhere.
    draft_vocab_size: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"unsupported model_type {self.model_type!r}")
        if self.draft_vocab_size is not None and (
            self.tie_word_embeddings or not 0 < self.draft_vocab_size <= self.vocab_size
        ):
            raise ValueError("a reduced head needs 0 < draft_vocab_size <= vocab_size, untied")
        if self.rope_scaling is not None:
            kind = self.rope_scaling.get("rope_type", self.rope_scaling.get("type", "default"))
            if kind not in ROPE_TYPES:
                raise ValueError(f"unsupported rope_scaling type {kind!r}")

    @property
    def kv_heads(self) -> int:
        """``num_key_value_heads``, resolved by ``__post_init__`` (never None after it)."""
        assert self.num_key_value_heads is not None
        return self.num_key_value_heads

    @property
    def head_size(self) -> int:
        """``head_dim``, resolved by ``__post_init__`` (never None after it)."""
        assert self.head_dim is not None
        return self.head_dim

    @property
    def qkv_bias(self) -> bool:
        """Qwen2 always has q/k/v biases (and no o_proj bias); Llama follows attention_bias."""
        return self.attention_bias or self.model_type == "qwen2"

    @property
    def o_bias(self) -> bool:
        return self.attention_bias and self.model_type != "qwen2"

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        eos = self.eos_token_id
        if eos is None:
            return ()
        return tuple(eos) if isinstance(eos, list | tuple) else (int(eos),)

    @classmethod
    def from_hf(cls, d: dict[str, Any]) -> ModelConfig:
        """Build from a config.json dict (transformers v4 ``rope_theta``/``rope_scaling`` or
        v5 ``rope_parameters``)."""
        d = dict(d)
        rope = d.get("rope_parameters") or {}
        theta = d.get("rope_theta", rope.get("rope_theta", 10000.0))
        scaling = d.get("rope_scaling")
        if scaling is None and rope.get("rope_type", "default") != "default":
            scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
        if scaling is not None and scaling.get("rope_type", scaling.get("type")) == "default":
            scaling = None
        known = {
            f for f in cls.__dataclass_fields__ if f not in ("extra", "rope_theta", "rope_scaling")
        }
        kw = {k: d[k] for k in known if d.get(k) is not None}
        extra = {k: v for k, v in d.items() if k not in known}
        return cls(**kw, rope_theta=float(theta), rope_scaling=scaling, extra=extra)

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        return cls.from_hf(json.loads(path.read_text()))

    def to_hf(self) -> dict[str, Any]:
        """A config.json dict that transformers loads as LlamaForCausalLM/Qwen2ForCausalLM."""
        d = asdict(self)
        d.pop("extra")
        arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
        arch["mistral"] = "MistralForCausalLM"
        d["architectures"] = [arch[self.model_type]]
        d["hidden_act"] = "silu"
        d["torch_dtype"] = "float32"
        for key in ("rope_scaling", "draft_vocab_size"):
            if d[key] is None:
                d.pop(key)
        return d
