"""The start messages of new generations, sent once their rows are committed: at once in
autocommit (one row, one INSERT: `services.generation_submit`), else after the caller's
transaction commits, all of its rows' messages together."""

from __future__ import annotations

from typing import Any

import redis
from django.db import transaction
from django.utils import timezone

from inference import wire
from inference.models import Generation, GenerationState


class Starts:
    """The start messages of the generations one transaction writes, sent after its commit.
    If Redis cannot take one, that row and every later one of the batch is failed (no row
    stays `queued` for a message that never left) and the error is raised: the caller
    answers 503."""

    def __init__(self) -> None:
        self.items: list[tuple[Any, int, dict]] = []
        self.flushed = False

    def flush(self) -> None:
        self.flushed = True
        for i, (_gid, verifier_id, payload) in enumerate(self.items):
            try:
                wire.send(verifier_id, "start", payload)
            except (redis.RedisError, OSError) as exc:
                unsent = [g for g, _, _ in self.items[i:]]
                Generation.objects.filter(pk__in=unsent, state=GenerationState.QUEUED).update(
                    state=GenerationState.FAILED,
                    finish_reason="error",
                    error=f"not started: the message queue is unreachable ({type(exc).__name__})",
                    finished_at=timezone.now(),
                )
                raise


def start_after_commit(gid, verifier_id: int, payload: dict) -> None:
    connection = transaction.get_connection()
    if not connection.in_atomic_block:  # autocommit: the row is committed already
        now = Starts()
        now.items.append((gid, verifier_id, payload))
        now.flush()
        return
    batch = getattr(connection, "tandem_starts", None)
    pending = [func for _, func, _ in connection.run_on_commit]
    if batch is None or batch.flushed or batch.flush not in pending:  # none open here yet
        batch = connection.tandem_starts = Starts()
        transaction.on_commit(batch.flush)
    batch.items.append((gid, verifier_id, payload))
