"""Messages to node workers. JSON only; the payload names generations by id.

Control messages -- cancel, config (to either role) -- go through the broker: one Celery
task, `tandem.node.message`, on the node's own queue `node.<id>`.

Messages on the hot path of every request or round -- start (to a verifier), drafts (to a
verifier), draft_start and results (to a drafter) -- skip Celery: one RPUSH onto the node's
Redis list `tandem:node:<id>:rounds`, read with BLPOP by the node's listener thread straight
into its engine loop's inbox (publishing a Celery task costs the web process milliseconds of
CPU per request). Reordering between the two channels is safe: a start precedes its round
messages (the verifier sends draft_start after prefilling it), a cancel that overtakes its
start leaves a tombstone that drops the start, a re-route's start that overtakes the cancel
of the old attempt replaces the old attempt (both roles), and attempt tombstones drop round
messages of ended attempts.
"""

from __future__ import annotations

import json
from typing import Any

TASK = "tandem.node.message"
ROUND_KINDS = frozenset({"start", "drafts", "draft_start", "results"})
ROUND_TTL_S = 3600  # an idle node's list does not live forever


def node_queue(node_id: int) -> str:
    return f"node.{node_id}"


def round_key(node_id: int) -> str:
    return f"tandem:node:{node_id}:rounds"


def send(node_id: int, kind: str, payload: dict[str, Any]) -> None:
    if kind in ROUND_KINDS:
        from inference.wire import _client

        key = round_key(node_id)
        pipe = _client().pipeline(transaction=False)
        pipe.rpush(key, json.dumps([kind, payload]))
        pipe.expire(key, ROUND_TTL_S)
        pipe.execute()
        return
    from fleet.celery import app

    app.send_task(TASK, args=[kind, payload], queue=node_queue(node_id), ignore_result=True)


def discard_rounds(node_id: int) -> None:
    """Drop a dead worker's pending round messages: they belong to attempts that end with
    it, and its restarted process has no tombstones to recognise them by."""
    from inference.wire import _client

    _client().delete(round_key(node_id))


def receive(node_id: int, timeout_s: float = 1.0) -> list[tuple[str, dict]]:
    """Round messages for a node, oldest first: blocks up to timeout_s for the first, then
    takes whatever else is already there."""
    from inference.wire import _client

    client, key = _client(), round_key(node_id)
    first = client.blpop([key], timeout=timeout_s)
    if first is None:
        return []
    raws = [first[1]]
    pipe = client.pipeline(transaction=True)  # atomic: a push in between is kept
    pipe.lrange(key, 0, 255)
    pipe.ltrim(key, 256, -1)
    raws += pipe.execute()[0]
    return [tuple(json.loads(r)) for r in raws]
