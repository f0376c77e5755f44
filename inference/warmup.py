"""What a pipeline waits for before it can serve: shared by the web and node processes like
`inference.wire`, torch-free and database-free."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import redis

from fleet import redis_clients

# -- warm-up: what a pipeline waits for before it can serve ----------------------------------
# "training the demo pair, 42%", "converting the SmolLM2 weights". Written by the process
# preparing the models (worker/local.py, `manage.py train_demo_pair`), read by the web (a 503
# with Retry-After instead of a hang or a confusing 400) and by the console. Kept in Redis, not
# the database: it is transient, written up to once a second, and must vanish by itself (a TTL)
# if the process preparing the models dies.

WARMUP_KEY = "tandem:warmup:{name}"
WARMUP_TTL_S = 120  # a status not refreshed for this long is stale: its writer died
MIN_RETRY_AFTER_S, MAX_RETRY_AFTER_S = 5, 120


@dataclass(frozen=True)
class Warmup:
    pipeline: str
    waiting_for: str  # "training the demo model pair", "converting the SmolLM2 weights"
    progress: float | None  # 0..1 when known
    eta_s: float | None  # seconds left, when it can be estimated

    @property
    def percent(self) -> int | None:
        return None if self.progress is None else int(self.progress * 100)

    @property
    def retry_after_s(self) -> int:
        eta = self.eta_s if self.eta_s is not None else MIN_RETRY_AFTER_S
        return int(min(max(eta, MIN_RETRY_AFTER_S), MAX_RETRY_AFTER_S))

    def describe(self) -> str:
        text = self.waiting_for
        if self.percent is not None:
            text += f" ({self.percent}% done"
            text += f", about {self.eta_s:.0f} s left)" if self.eta_s is not None else ")"
        return text


def warmup_publish(
    *,
    pipeline: str,
    waiting_for: str,
    progress: float | None = None,
    eta_s: float | None = None,
    ttl_s: int = WARMUP_TTL_S,
) -> None:
    value = {"waiting_for": waiting_for, "progress": progress, "eta_s": eta_s}
    redis_clients.client().set(WARMUP_KEY.format(name=pipeline), json.dumps(value), ex=ttl_s)


def warmup_clear(*, pipeline: str) -> None:
    redis_clients.client().delete(WARMUP_KEY.format(name=pipeline))


def warmup_status(pipeline: str) -> Warmup | None:
    """The pipeline's warm-up, or None when nothing is being prepared for it."""
    raw = redis_clients.client().get(WARMUP_KEY.format(name=pipeline))
    if raw is None:
        return None
    value = json.loads(raw)
    return Warmup(pipeline, value["waiting_for"], value.get("progress"), value.get("eta_s"))


def warmup_statuses(pipelines: list[str]) -> dict[str, Warmup]:
    """Warm-ups of several pipelines in one round trip (the console's lists)."""
    if not pipelines:
        return {}
    raws = redis_clients.client().mget([WARMUP_KEY.format(name=n) for n in pipelines])
    out = {}
    for name, raw in zip(pipelines, raws, strict=True):
        if raw is not None:
            v = json.loads(raw)
            out[name] = Warmup(name, v["waiting_for"], v.get("progress"), v.get("eta_s"))
    return out


class WarmupReporter:
    """Publishes a long job's progress at most once a second, with an estimate of the time
    left from the rate so far."""

    def __init__(self, *, pipeline: str, waiting_for: str, every_s: float = 1.0):
        self.pipeline, self.waiting_for, self.every_s = pipeline, waiting_for, every_s
        self.started = time.monotonic()
        self._last = 0.0

    def report(self, progress: float | None = None, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.every_s:
            return
        self._last = now
        eta = None
        if progress is not None and progress > 0.01:
            eta = (now - self.started) * (1 - progress) / progress
        try:
            warmup_publish(
                pipeline=self.pipeline, waiting_for=self.waiting_for, progress=progress, eta_s=eta
            )
        except redis.RedisError:
            pass  # progress is for people watching; the job itself goes on
