"""The state changes a verifier's signed reports make, applied by the ledger consumer
(`inference.ledger`): claims (queued -> running), first tokens, finishes, and a finish set
aside as bad data. The verifier owns a running generation's row; the rest of a generation's
state changes are `inference.services`'.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from inference.models import Generation, GenerationState
from inference.services import db_text, end_generation

# Each is idempotent by (generation, attempt) and confined to rows assigned to `node_id`
# (the node that signed the report): a node cannot move another node's generations.


def generations_claim(
    *, node_id: int, starts: list[tuple[str, int]], now: datetime | None = None
) -> set[tuple[str, int]]:
    """queued -> running for each (generation id, attempt) verified by `node_id`, one UPDATE
    per attempt number; returns the (id, attempt) pairs that are running there now (a claim
    applied twice answers the same), not those cancelled or re-routed meanwhile."""
    now = now or timezone.now()
    claimed: set[tuple[str, int]] = set()
    by_attempt: dict[int, list[str]] = {}
    for gid, attempt in starts:
        by_attempt.setdefault(int(attempt), []).append(str(gid))
    for attempt, ids in by_attempt.items():
        mine = Generation.objects.filter(pk__in=ids, attempts=attempt, verifier_id=node_id)
        mine.filter(state=GenerationState.QUEUED).update(
            state=GenerationState.RUNNING, started_at=now
        )
        claimed |= {
            (str(pk), attempt)
            for pk in mine.filter(state=GenerationState.RUNNING).values_list("pk", flat=True)
        }
    return claimed


def generations_first_token(*, node_id: int, ids: list[str], at: datetime) -> int:
    return Generation.objects.filter(
        pk__in=ids, verifier_id=node_id, first_token_at__isnull=True
    ).update(first_token_at=at)


def generation_finish(
    *,
    node_id: int,
    generation_id,
    attempt: int,
    finish_reason: str,
    output_tokens: list[int],
    output_text: str,
    counters: dict,
    itl_ms: dict,
    rounds: dict | None = None,
    error: str = "",
) -> bool:
    """running -> finished (or failed with `error`) by the verifier that ran this attempt."""
    state = GenerationState.FAILED if error else GenerationState.FINISHED
    return bool(
        Generation.objects.filter(
            pk=generation_id,
            state=GenerationState.RUNNING,
            attempts=attempt,
            verifier_id=node_id,
        ).update(
            state=state,
            finish_reason=finish_reason,
            error=db_text(error),
            output_tokens=output_tokens,
            output_text=db_text(output_text),
            counters=counters,
            itl_ms=itl_ms,
            rounds=rounds or {},
            finished_at=timezone.now(),
        )
    )


def generation_refuse_finish(*, node_id: int, generation_id, attempt: int, error: str) -> bool:
    """The ledger set this verifier's finish aside (bad data): its running attempt fails
    with `error`, keeping what was streamed. Nothing when it is not that node's attempt."""
    generation = (
        Generation.objects.select_for_update()
        .filter(
            pk=generation_id,
            state=GenerationState.RUNNING,
            attempts=attempt,
            verifier_id=node_id,
        )
        .first()
    )
    if generation is None:
        return False
    end_generation(generation, state=GenerationState.FAILED, finish_reason="error", error=error)
    return True
