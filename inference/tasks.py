"""Celery adapters of the data plane (thin: ids and JSON in, services and loops out).

`tandem.node.message` runs on a node worker (queue `node.<id>`, solo pool): it hands the
message to the process's engine loop (when the control plane signed it for this node) and
returns at once. `tandem.generations.watchdog`
runs periodically on the control worker (celery beat).
"""

from __future__ import annotations

import logging

from celery import shared_task

from inference.learning import tasks as learning_tasks  # noqa: F401  (registers them)
from inference.wire import TASK

logger = logging.getLogger(__name__)


@shared_task(name=TASK, ignore_result=True, acks_late=False)
def node_message(kind: str, payload: dict) -> None:
    from inference.worker.engine_loop import current

    loop = current()
    if loop is None:
        logger.warning("node message %r arrived before the engine loop started", kind)
        return
    loop.accept_control(kind, payload)


@shared_task(name="tandem.generations.watchdog", ignore_result=True, time_limit=60)
def generations_watchdog() -> None:
    from inference.services import generations_watchdog as run

    run()
