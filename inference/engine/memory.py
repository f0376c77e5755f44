"""Memory accounting: what a loaded model's weights really occupy, and how many KV cache
slots of which length fit a memory budget (as vLLM's ``gpu_memory_utilization``).

Weights are counted by unique storage, so a parameter that views a fused buffer (see
``FusedLinear.share_storage_``) is counted once. Kernel-layout copies (the oneDNN-packed
weights and transposed GEMV weights FusedLinear builds on CPU) are counted apart: they are
copies by design, made only on CPU.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import torch
from torch import Tensor


def _storage_key(t: Tensor) -> tuple:
    try:
        return (str(t.device), t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # opaque layouts (mkldnn): no shared storage
        return (str(t.device), id(t))


def _storage_nbytes(t: Tensor) -> int:
    try:
        return t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return t.numel() * t.element_size()


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views of one buffer count once)."""
    seen: dict[tuple, int] = {}
    for t in tensors:
        if t is not None and t.device.type != "meta":
            seen[_storage_key(t)] = _storage_nbytes(t)
    return sum(seen.values())


def checkpoint_bytes(model) -> int:
    """The checkpoint's size in the model's dtype: one tensor per state-dict name (a tied head
    counted once)."""
    sd = model.state_dict()
    if model.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    return sum(t.numel() * t.element_size() for t in sd.values())


def weights_memory(model) -> dict[str, float]:
    """{checkpoint_bytes, weights_bytes (parameters, buffers and the fused weights),
    kernel_copy_bytes (CPU kernel layouts), ratio (weights / checkpoint), ratio_with_copies}."""
    fused = model.fused_linears()
    main = [*model.parameters(), *model.buffers()]
    main += [getattr(f, a, None) for f in fused for a in ("weight", "bias")]
    copies = [getattr(f, a, None) for f in fused for a in ("_wt", "_packed")]
    ckpt, w = checkpoint_bytes(model), storage_bytes(main)
    extra = storage_bytes(copies)
    return {
        "checkpoint_bytes": ckpt,
        "weights_bytes": w,
        "kernel_copy_bytes": extra,
        "ratio": w / ckpt,
        "ratio_with_copies": (w + extra) / ckpt,
    }


# -- KV cache sizing ---------------------------------------------------------------------------


def kv_bytes_per_token(config, dtype: torch.dtype) -> int:
    """K and V of one position, all layers."""
    elem = torch.empty((), dtype=dtype).element_size()
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * elem


def free_memory_bytes(device: torch.device | str) -> tuple[int, int]:
    """(free, total) bytes on ``device``: the CUDA allocator's view on a GPU, MemAvailable /
    MemTotal on a CPU host."""
    device = torch.device(device)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return int(free), int(total)
    info = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, value = line.split(":", 1)
                info[name] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    total = info.get("MemTotal") or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(info.get("MemAvailable", total)), int(total)


# of free memory on a GPU (the weights are already loaded: like vLLM's 0.9 of the whole device
# minus what is in use); on a CPU host the node shares RAM with everything else on it
DEFAULT_FRACTION = {"cuda": 0.9, "cpu": 0.25}


@dataclass
class KVPlan:
    n_slots: int
    max_len: int
    budget_bytes: int
    bytes_per_slot: int

    @property
    def cache_bytes(self) -> int:
        return (self.n_slots + 1) * self.bytes_per_slot  # + the scratch slot

    def to_dict(self) -> dict:
        return asdict(self) | {"cache_bytes": self.cache_bytes}


class KVBudgetTooSmall(ValueError):
    pass


def plan_kv(
    config,
    dtype: torch.dtype,
    device: torch.device | str,
    *,
    context: int,
    max_slots: int,
    budget_bytes: int | None = None,
    memory_fraction: float | None = None,
) -> KVPlan:
    """Slots x max_len for a cache: ``max_len`` is the pipeline's context (capped at the
    model's ``max_position_embeddings``, never taken from it blindly); as many slots as the
    budget holds, at most ``max_slots``. The budget is ``budget_bytes`` when given, else
    ``memory_fraction`` (default per device type) of the device's free memory now."""
    if context < 2:
        raise ValueError(f"context must be at least 2 tokens, not {context}")
    max_len = min(int(context), config.max_position_embeddings)
    per_slot = kv_bytes_per_token(config, dtype) * max_len
    if budget_bytes is None:
        kind = torch.device(device).type
        fraction = DEFAULT_FRACTION.get(kind, 0.5) if memory_fraction is None else memory_fraction
        if not 0 < fraction <= 1:
            raise ValueError(f"memory fraction must be in (0, 1], not {fraction}")
        free, _total = free_memory_bytes(device)
        budget_bytes = int(free * fraction)
    n = min(max_slots, budget_bytes // per_slot - 1)  # one slot's worth is the scratch slot
    if n < 1:
        raise KVBudgetTooSmall(
            f"a KV budget of {budget_bytes / 2**20:.1f} MiB holds no slot of {max_len} "
            f"positions ({per_slot / 2**20:.1f} MiB each, plus one scratch slot)"
        )
    return KVPlan(int(n), max_len, int(budget_bytes), per_slot)
