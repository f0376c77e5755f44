"""A sequence's rounds as its verifier saw them, for the request's timeline.

One entry per verify round the sequence took part in: when the round ended (ms after the
attempt's prefill began), the draft tokens verified (k), how many were accepted, the verify
batch it shared and the round's forward time. The verifier sends the log with the finish
report; the ledger keeps it on the generation (`Generation.rounds`). Bounded: a long
generation keeps its first MAX_ROUNDS rounds and counts the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from inference.report_checks import MAX_ROUNDS, ROUND_FIELDS


@dataclass
class RoundLog:
    t0: float = field(default_factory=time.time)  # wall clock when the attempt's prefill began
    prefill_ms: float | None = None
    rounds: list[list[float]] = field(default_factory=list)
    dropped: int = 0

    def prefilled(self, seconds: float) -> None:
        self.prefill_ms = round(seconds * 1000, 2)

    def round(self, *, k: int, accepted: int, batch: int, verify_s: float) -> None:
        if len(self.rounds) >= MAX_ROUNDS:
            self.dropped += 1
            return
        at_ms = round((time.time() - self.t0) * 1000, 2)
        self.rounds.append([at_ms, k, accepted, batch, round(verify_s * 1000, 3)])

    def to_json(self) -> dict:
        return {
            "t0": self.t0,
            "prefill_ms": self.prefill_ms,
            "fields": list(ROUND_FIELDS),
            "rounds": self.rounds,
            "dropped": self.dropped,
        }
