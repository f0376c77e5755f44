"""The node worker's Celery task (thin: JSON in, the engine loop out).

`tandem.node.message` runs on a node worker (queue `node.<id>`, solo pool): it hands the
message to the process's engine loop (when the control plane signed it for this node) and
returns at once. Registered by `boot.run` before the worker consumes; the control plane
sends it by name (`inference.wire.send`), never importing this module.
"""

from __future__ import annotations

import logging

from celery import shared_task

from inference.wire import TASK
from inference.worker.engine_loop import current

logger = logging.getLogger(__name__)


@shared_task(name=TASK, ignore_result=True, acks_late=False)
def node_message(kind: str, payload: dict) -> None:
    loop = current()
    if loop is None:
        logger.warning("node message %r arrived before the engine loop started", kind)
        return
    loop.accept_control(kind, payload)
