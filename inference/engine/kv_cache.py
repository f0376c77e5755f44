"""Static KV cache: ``n_slots`` sequences x ``max_len`` positions, per-layer k/v tensors.

Rollback is logical (a length goes down; stale positions are overwritten later), as in
vLLM. Writes of padding tokens go to a scratch slot (index ``n_slots``) so a padded batch
never touches another sequence and never needs a host sync.
"""

from __future__ import annotations

import torch


class CacheError(RuntimeError):
    pass


class CacheFull(CacheError):
    """No free slot left."""


class CacheOverflow(CacheError):
    """A sequence would outgrow ``max_len``; raised before anything is written."""


# max_len when none is given: a model's max_position_embeddings (131,072 for Llama 3) would
# make one slot gigabytes; a node sizes its cache from its context and memory budget instead
DEFAULT_MAX_LEN = 4096


class KVCache:
    def __init__(
        self,
        n_layers: int,
        n_slots: int,
        max_len: int,
        n_kv_heads: int,
        head_dim: int,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.n_slots, self.max_len = n_slots, max_len
        shape = (n_slots + 1, max_len, n_kv_heads, head_dim)  # +1: scratch slot for padding
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self._len = [0] * n_slots  # host-side lengths: reading one never syncs a device
        self._free = list(range(n_slots - 1, -1, -1))  # a stack: lowest slot first
        self._used: set[int] = set()

    @classmethod
    def for_model(cls, model, n_slots: int, max_len: int | None = None) -> KVCache:
        c, p = model.config, next(model.parameters())
        max_len = max_len or min(c.max_position_embeddings, DEFAULT_MAX_LEN)
        return cls(
            c.num_hidden_layers,
            n_slots,
            max_len,
            c.num_key_value_heads,
            c.head_dim,
            device=p.device,
            dtype=p.dtype,
        )

    @property
    def scratch(self) -> int:
        return self.n_slots

    @property
    def n_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise CacheFull(f"all {self.n_slots} KV cache slots are in use")
        slot = self._free.pop()
        self._used.add(slot)
        self._len[slot] = 0
        return slot

    def free(self, slot: int) -> None:
        self._check(slot)
        self._len[slot] = 0
        self._used.discard(slot)
        self._free.append(slot)

    @property
    def lengths(self) -> torch.Tensor:
        """A copy of all slots' lengths, LongTensor[n_slots]."""
        return torch.tensor(self._len)

    def length(self, slot: int) -> int:
        return self._len[slot]

    def rollback(self, slot: int, new_length: int) -> None:
        self._check(slot)
        if not 0 <= new_length <= self._len[slot]:
            raise CacheError(f"rollback to {new_length} > length {self._len[slot]}")
        self._len[slot] = new_length

    def reserve(self, slots: list[int], n_new: list[int]) -> list[int]:
        """Check that ``n_new[i]`` tokens fit in ``slots[i]``; return the start positions."""
        start = [self._len[s] for s in slots]
        for s, a, n in zip(slots, start, n_new, strict=True):
            if a + n > self.max_len:
                raise CacheOverflow(f"slot {s}: {a} + {n} tokens exceed max_len {self.max_len}")
        return start

    def advance(self, slots: list[int], n_new: list[int]) -> None:
        for s, n in zip(slots, n_new, strict=True):
            self._len[s] += n

    def stats(self) -> dict[str, int]:
        """Capacity and usage, for a node's inspection figures (host-side: no device sync)."""
        return {
            "n_slots": self.n_slots,
            "max_len": self.max_len,
            "slots_used": len(self._used),
            "capacity_tokens": self.n_slots * self.max_len,
            "used_tokens": sum(self._len[s] for s in self._used),
            "cache_bytes": sum(t.numel() * t.element_size() for t in (*self.k, *self.v)),
        }

    def _check(self, slot: int) -> None:
        if slot not in self._used:
            raise CacheError(f"slot {slot} is not allocated")
