"""Configuration pushes that must reach the nodes: an outbox (the transactional-outbox pattern).

A change records its push (`record`) in the transaction that commits the change, so the
two are committed together or not at all. After commit the push is attempted at once
(`deliver`); while Redis is unreachable it stays in the outbox and the control worker's
beat retries every pending push (`deliver_pending`, task `tandem.pipelines.deliver_pushes`)
until it is delivered. A push carries the pipeline's configuration as it is when delivered,
so a retried one is never older than what the node may have got since.

An API call whose push could not be delivered answers 202 and says so
(`undelivered_here`): the change is committed and will reach the nodes, not a 500.
"""

from __future__ import annotations

import logging
import threading
from functools import partial

from django.db import transaction
from django.db.models import F
from redis.exceptions import RedisError

from fleet.logs import Throttled
from fleet.pipelines import signals
from fleet.pipelines.models import ConfigPush, Pipeline

logger = logging.getLogger(__name__)
_throttled = Throttled(logger, every_s=30.0)

# Pipelines whose push this thread could not deliver since it last asked (a request's thread:
# the after-commit attempt runs in it, right before the view builds its answer).
_local = threading.local()


def record(pipeline_id: int, node_ids: list[int] | None = None) -> None:
    """In the change's transaction: the push is owed from now on; attempted after commit."""
    push = ConfigPush.objects.create(pipeline_id=pipeline_id, node_ids=node_ids)
    _undelivered().discard(pipeline_id)  # what this change's push does is yet to be seen
    transaction.on_commit(partial(deliver, push.pk))


def push_config(pipeline_id: int, node_ids: list[int] | None = None) -> None:
    """Sends the committed configuration to the running workers: `signals.config_committed`,
    whose receiver is the data plane's (this app never imports it). To every placed node,
    or to `node_ids`."""
    pipeline = Pipeline.objects.filter(pk=pipeline_id).first()
    if pipeline is not None:
        signals.config_committed.send(sender=Pipeline, pipeline=pipeline, node_ids=node_ids)


def deliver(push_id: int) -> bool:
    """Send one pending push; True once it is delivered (or was, by another attempt)."""
    push = ConfigPush.objects.filter(pk=push_id).first()
    if push is None:
        return True
    try:
        push_config(push.pipeline_id, push.node_ids)
    except (RedisError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"[:200]
        ConfigPush.objects.filter(pk=push_id).update(attempts=F("attempts") + 1, last_error=error)
        _undelivered().add(push.pipeline_id)
        _throttled.warning(
            "configuration push to pipeline %s pending (will retry): %s", push.pipeline_id, error
        )
        return False
    ConfigPush.objects.filter(pk=push_id).delete()
    return True


def deliver_pending(limit: int = 200) -> dict:
    """Retry the oldest pending pushes, in order; stops at the first that fails (Redis is
    still away: the rest would fail the same)."""
    delivered = 0
    ids = list(ConfigPush.objects.values_list("pk", flat=True)[:limit])
    for push_id in ids:
        if not deliver(push_id):
            break
        delivered += 1
    return {"delivered": delivered, "pending": ConfigPush.objects.count()}


def _undelivered() -> set[int]:
    pending = getattr(_local, "undelivered", None)
    if pending is None:
        pending = _local.undelivered = set()
    return pending


def undelivered_here(pipeline_id: int) -> bool:
    """Whether this thread's last push of `pipeline_id` is still pending (asking clears it)."""
    pending = _undelivered()
    found = pipeline_id in pending
    pending.discard(pipeline_id)
    return found


PENDING_NOTE = (
    "The change is committed; the nodes could not be reached just now (the message queue is "
    "unavailable). The push is queued and retried until the nodes have it."
)


def answer(response, *pipeline_ids: int):
    """An API answer after a change: 202, with `config_push` saying what will happen, when
    the push of one of `pipeline_ids` could not be delivered at commit."""
    if [pid for pid in pipeline_ids if undelivered_here(pid)]:
        response.status_code = 202
        response.data["config_push"] = {"state": "pending", "detail": PENDING_NOTE}
    return response
