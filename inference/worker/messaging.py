"""Messages to node workers through the broker: one Celery task, `tandem.node.message`,
on the node's own queue `node.<id>`. JSON only; the payload names generations by id.

Kinds: start, cancel, config (to either role); drafts (to a verifier); draft_start,
results (to a drafter).
"""

from __future__ import annotations

from typing import Any

TASK = "tandem.node.message"


def node_queue(node_id: int) -> str:
    return f"node.{node_id}"


def send(node_id: int, kind: str, payload: dict[str, Any]) -> None:
    from fleet.celery import app

    app.send_task(TASK, args=[kind, payload], queue=node_queue(node_id), ignore_result=True)
