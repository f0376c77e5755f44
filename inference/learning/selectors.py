"""Read queries of learning from traffic: the policy, pairs a user may read, draft versions,
the canary a drafter is told about, and acceptance/goodput measured per arm."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from fleet.accounts.access import can
from inference.learning import split
from inference.learning.models import CapturedPair, DraftStatus, DraftVersion, LearningPolicy
from inference.models import Generation, GenerationState


def policy_of(pipeline) -> LearningPolicy:
    """The pipeline's policy (off, with defaults, when an operator never set one; not saved)."""
    found = LearningPolicy.objects.filter(pipeline=pipeline).first()
    return found if found is not None else LearningPolicy(pipeline=pipeline)


def versions_of(pipeline) -> QuerySet[DraftVersion]:
    return DraftVersion.objects.filter(pipeline=pipeline).select_related("parent")


def candidate_of(pipeline) -> DraftVersion | None:
    return versions_of(pipeline).filter(status=DraftStatus.CANDIDATE).first()


def promoted_of(pipeline) -> DraftVersion | None:
    return versions_of(pipeline).filter(status=DraftStatus.PROMOTED).first()


def canary_of(pipeline) -> dict | None:
    """What a drafter of the pipeline needs to canary the candidate, or None: the draft
    model it loads beside the serving one and the share of sequences it drafts for."""
    version = candidate_of(pipeline)
    if version is None or not version.path:
        return None
    fraction = policy_of(pipeline).canary_fraction
    return {"version": version.number, "draft_model": version.path, "fraction": fraction}


def readable(pair: CapturedPair, user) -> bool:
    """A pair is generation content: the generation's own rule decides (owner, content role,
    the content group)."""
    return can(user, "read_content", pair)


def pairs_of(pipeline) -> QuerySet[CapturedPair]:
    return CapturedPair.objects.filter(pipeline=pipeline)


@dataclass(frozen=True)
class Arm:
    generations: int
    drafted: int
    accepted: int
    tokens: int
    seconds: float

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def goodput_tps(self) -> float | None:
        """Output tokens per second of a sequence (its tokens over its running time)."""
        return self.tokens / self.seconds if self.seconds > 0 else None


def _arm(rows) -> Arm:
    drafted = accepted = tokens = 0
    seconds = 0.0
    for r in rows:
        c = r["counters"] or {}
        drafted += int(c.get("num_draft_tokens") or 0)
        accepted += int(c.get("num_accepted_tokens") or 0)
        if r["started_at"] and r["finished_at"]:
            tokens += len(r["output_tokens"] or [])
            seconds += (r["finished_at"] - r["started_at"]).total_seconds()
    return Arm(len(rows), drafted, accepted, tokens, seconds)


def measured_arms(pipeline, *, since: datetime, fraction: float | None) -> tuple[Arm, Arm]:
    """(serving arm, canary arm) over generations created and finished since `since`: a
    generation's arm is `split.in_canary` of its id (no canary: everything is serving)."""
    rows: list[dict] = [
        dict(r)
        for r in Generation.objects.filter(
            pipeline=pipeline,
            state=GenerationState.FINISHED,
            created_at__gte=since,
        ).values("id", "counters", "output_tokens", "started_at", "finished_at")
    ]
    canary = [r for r in rows if fraction and split.in_canary(str(r["id"]), fraction)]
    ids = {r["id"] for r in canary}
    return _arm([r for r in rows if r["id"] not in ids]), _arm(canary)
