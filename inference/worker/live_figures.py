"""Live figures of one node worker, read by its agent for telemetry and by inspection."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence


class LoopStats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batch_sizes: dict[int, int] = {}  # batch size -> rounds
        self.step_ms: deque[float] = deque(maxlen=512)
        self.tokens_generated = 0
        self.rounds = 0
        self.busy_s = 0.0  # time spent in forward passes (utilization = busy / wall)
        self.started = time.monotonic()
        self.last_tick = time.monotonic()
        self.finished = 0
        self.prefills = 0
        self.itl_s: list[float] = []  # since the agent last took them (telemetry histograms)
        self.ttft_s: list[float] = []
        self.errors = 0
        self.degraded = 0  # sequences decoded plainly (k=0) because their drafter was lost
        self.phase_s: dict[str, float] = {}  # where the loop's time goes (seconds by phase)
        self.k_rounds: dict[str, int] = {}  # "<batch>:<k>" -> draft rounds (the k chosen)

    def record_round(self, batch: int, seconds: float, tokens: int = 0) -> None:
        with self.lock:
            self.batch_sizes[batch] = self.batch_sizes.get(batch, 0) + 1
            self.step_ms.append(seconds * 1000)
            self.tokens_generated += tokens
            self.rounds += 1
            self.busy_s += seconds

    def record_k(self, batch: int, k: int) -> None:
        with self.lock:
            key = f"{batch}:{k}"
            self.k_rounds[key] = self.k_rounds.get(key, 0) + 1

    def record_prefill(self, n: int, seconds: float) -> None:
        """A prefill pass: busy time and first tokens, not a verify round (no histogram)."""
        with self.lock:
            self.prefills += n
            self.tokens_generated += n
            self.busy_s += seconds

    def record_latencies(
        self, *, itl_s: Sequence[float] = (), ttft_s: Sequence[float] = ()
    ) -> None:
        with self.lock:
            if len(self.itl_s) < 100_000:
                self.itl_s.extend(itl_s)
                self.ttft_s.extend(ttft_s)

    def take_latencies(self) -> tuple[list[float], list[float]]:
        with self.lock:
            out = (self.itl_s, self.ttft_s)
            self.itl_s, self.ttft_s = [], []
            return out

    def record_degraded(self, n: int) -> None:
        with self.lock:
            self.degraded += n

    def add_phase(self, name: str, seconds: float) -> None:
        with self.lock:
            self.phase_s[name] = self.phase_s.get(name, 0.0) + seconds

    def tick(self) -> None:
        self.last_tick = time.monotonic()

    def snapshot(self) -> dict:
        with self.lock:
            steps = sorted(self.step_ms)
            n = sum(self.batch_sizes.values())
            return {
                "batch_size_hist": {str(k): v for k, v in sorted(self.batch_sizes.items())},
                "mean_batch": (sum(k * v for k, v in self.batch_sizes.items()) / n) if n else 0.0,
                "rounds": self.rounds,
                "tokens_generated": self.tokens_generated,
                "step_ms_p50": steps[len(steps) // 2] if steps else None,
                "step_ms_p99": steps[min(len(steps) - 1, int(len(steps) * 0.99))]
                if steps
                else None,
                "busy_s": self.busy_s,
                "finished": self.finished,
                "prefills": self.prefills,
                "errors": self.errors,
                "degraded": self.degraded,
                "phase_s": dict(self.phase_s),
                "k_rounds": dict(self.k_rounds),
            }
