"""Speculative-decoding counters, named as vLLM names them, mergeable and JSON-able.

One ``SpecCounters`` per sequence and one per engine; the control plane merges them.
Derived figures: acceptance rate = accepted / drafted; mean acceptance length (vLLM) =
1 + accepted / drafts; per-position acceptance = accepted_per_pos[i] / drafts reaching i.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class SpecCounters:
    num_drafts: int = 0  # verification rounds that carried a draft (k >= 1)
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    num_draft_tokens_per_pos: list[int] = field(default_factory=list)
    num_emitted_tokens: int = 0  # accepted + correction/bonus (+ prefill token)
    num_draft_steps: int = 0  # draft forward passes
    draft_time_s: float = 0.0
    num_verify_steps: int = 0  # verify forward passes (decoding steps; prefill apart)
    verify_time_s: float = 0.0
    verify_batch_sizes: dict[int, int] = field(default_factory=dict)  # size -> count
    # prompt prefills (target and draft), kept apart so that a step time is a step's time
    num_prefills: int = 0
    num_prefill_tokens: int = 0
    prefill_time_s: float = 0.0

    def record_round(self, n_draft: int, n_accepted: int, n_emitted: int) -> None:
        self.num_emitted_tokens += n_emitted
        if n_draft == 0:
            return
        self.num_drafts += 1
        self.num_draft_tokens += n_draft
        self.num_accepted_tokens += n_accepted
        _add_at(self.num_draft_tokens_per_pos, range(n_draft))
        _add_at(self.num_accepted_tokens_per_pos, range(n_accepted))

    def record_draft_step(self, seconds: float, n: int = 1) -> None:
        self.num_draft_steps += n
        self.draft_time_s += seconds

    def record_prefill(self, seconds: float, n_tokens: int) -> None:
        self.num_prefills += 1
        self.num_prefill_tokens += n_tokens
        self.prefill_time_s += seconds

    def record_verify_step(self, seconds: float, batch_size: int) -> None:
        self.num_verify_steps += 1
        self.verify_time_s += seconds
        self.verify_batch_sizes[batch_size] = self.verify_batch_sizes.get(batch_size, 0) + 1

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        return 1 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0

    @property
    def acceptance_rate_per_pos(self) -> list[float]:
        acc = self.num_accepted_tokens_per_pos
        return [
            (acc[i] if i < len(acc) else 0) / d if d else 0.0
            for i, d in enumerate(self.num_draft_tokens_per_pos)
        ]

    def merge(self, other: SpecCounters) -> SpecCounters:
        """Add ``other`` into self (returns self)."""
        for name in (
            "num_drafts",
            "num_draft_tokens",
            "num_accepted_tokens",
            "num_emitted_tokens",
            "num_draft_steps",
            "draft_time_s",
            "num_verify_steps",
            "verify_time_s",
            "num_prefills",
            "num_prefill_tokens",
            "prefill_time_s",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        _add_at(self.num_accepted_tokens_per_pos, values=other.num_accepted_tokens_per_pos)
        _add_at(self.num_draft_tokens_per_pos, values=other.num_draft_tokens_per_pos)
        for size, n in other.verify_batch_sizes.items():
            self.verify_batch_sizes[size] = self.verify_batch_sizes.get(size, 0) + n
        return self

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verify_batch_sizes"] = {str(k): v for k, v in sorted(self.verify_batch_sizes.items())}
        d["acceptance_rate"] = self.acceptance_rate
        d["mean_acceptance_length"] = self.mean_acceptance_length
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpecCounters:
        names = cls.__dataclass_fields__
        c = cls(**{k: v for k, v in d.items() if k in names})
        c.verify_batch_sizes = {int(k): v for k, v in c.verify_batch_sizes.items()}
        c.num_accepted_tokens_per_pos = list(c.num_accepted_tokens_per_pos)
        c.num_draft_tokens_per_pos = list(c.num_draft_tokens_per_pos)
        return c


def _add_at(acc: list[int], positions=(), values=None) -> None:
    """acc[i] += 1 for i in positions, or acc[i] += values[i]; grows acc as needed."""
    items = enumerate(values) if values is not None else ((i, 1) for i in positions)
    for i, v in items:
        if i >= len(acc):
            acc.extend([0] * (i + 1 - len(acc)))
        acc[i] += v
