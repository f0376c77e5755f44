"""Why a pipeline cannot take a request yet, and when to ask again: the 503 + Retry-After a
client gets instead of a hang or a confusing 400 while a pipeline's models are prepared
(`inference.wire`'s warm-up state) or its node workers start.

Consulted only on the failure paths (model files absent, no healthy pair), so a serving
pipeline pays nothing for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.exceptions import RedisError

from fleet.pipelines.models import Pipeline
from inference import warmup

DEFAULT_RETRY_AFTER_S = 5


@dataclass(frozen=True)
class NotReady:
    message: str
    retry_after_s: int
    warming_up: bool  # False: no warm-up known, the pipeline is just short of workers


def not_ready(pipeline: Pipeline, *, cause: str) -> NotReady:
    try:
        status = warmup.warmup_status(pipeline.name)
    except RedisError:
        status = None
    if status is None:
        return NotReady(
            f"The model '{pipeline.name}' cannot take requests right now: {cause}. "
            f"Retry in {DEFAULT_RETRY_AFTER_S} s.",
            DEFAULT_RETRY_AFTER_S,
            warming_up=False,
        )
    return NotReady(
        f"The model '{pipeline.name}' is not ready yet: waiting for {status.describe()}. "
        f"Retry in {status.retry_after_s} s.",
        status.retry_after_s,
        warming_up=True,
    )


def warming_up(pipelines) -> dict[int, warmup.Warmup]:
    """Pipeline id -> its warm-up, for the pipelines that cannot serve yet (the console)."""
    from inference.router import NoCapacity, pick_pair

    pipelines = [p for p in pipelines if not p.simulated]
    try:
        found = warmup.warmup_statuses([p.name for p in pipelines])
    except RedisError:
        return {}
    out = {}
    for pipeline in pipelines:
        status = found.get(pipeline.name)
        if status is None:
            continue
        try:
            pick_pair(pipeline)  # serving already: a "loading" note not yet expired
        except NoCapacity:
            out[pipeline.pk] = status
    return out
