"""Model references -> loaded engines, once per worker process. Imports torch."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings


def model_dir(ref: str) -> Path:
    """A pipeline's model reference: a directory under DATA_DIR/models, or an absolute path."""
    path = Path(ref)
    return path if path.is_absolute() else Path(settings.DATA_DIR) / "models" / ref


def torch_device() -> str:
    """Where the engine computes: TANDEM_TORCH_DEVICE (e.g. cuda, cuda:1), default cpu."""
    return os.environ.get("TANDEM_TORCH_DEVICE", "cpu")


def n_slots() -> int:
    return int(os.environ.get("TANDEM_NODE_SLOTS", "64"))


def max_len() -> int | None:
    value = os.environ.get("TANDEM_NODE_MAX_LEN")
    return int(value) if value else None


def load_verify_engine(ref: str):
    import torch

    from inference.engine.engines import VerifyEngine
    from inference.engine.loading import load_checkpoint

    torch.set_grad_enabled(False)
    model, tokenizer = load_checkpoint(model_dir(ref), device=torch_device())
    return VerifyEngine(model, tokenizer, n_slots=n_slots(), max_len=max_len())


def load_draft_engine(kind: str, ref: str):
    from inference.engine.engines import DraftEngine

    if kind == "ngram":
        return DraftEngine.ngram()
    import torch

    from inference.engine.loading import load_checkpoint

    torch.set_grad_enabled(False)
    model, tokenizer = load_checkpoint(model_dir(ref), device=torch_device())
    return DraftEngine.from_model(model, tokenizer, n_slots=n_slots(), max_len=max_len())


def sampling_params(params: dict, *, already: int = 0):
    """Generation.params -> SamplingParams; `already` tokens were emitted by an earlier
    attempt (a resumed generation only has the rest of max_tokens left)."""
    from inference.engine.sampling import SamplingParams

    return SamplingParams(
        temperature=float(params.get("temperature", 1.0)),
        top_k=int(params.get("top_k") or 0),
        top_p=float(params.get("top_p", 1.0)),
        seed=params.get("seed"),
        max_tokens=max(0, int(params.get("max_tokens", 16)) - already),
        stop=list(params.get("stop") or []),
        ignore_eos=bool(params.get("ignore_eos", False)),
    )
