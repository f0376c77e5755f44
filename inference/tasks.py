"""Celery adapters of the data plane's control side (thin: ids in, services out).

`tandem.generations.watchdog` runs periodically on the control worker (celery beat). The
node workers' task (`tandem.node.message`) lives with them: `inference.worker.tasks`.
"""

from __future__ import annotations

import logging

from celery import shared_task

from inference.learning import tasks as learning_tasks  # noqa: F401  (registers them)

logger = logging.getLogger(__name__)


@shared_task(name="tandem.generations.watchdog", ignore_result=True, time_limit=60)
def generations_watchdog() -> None:
    from inference.services import generations_watchdog as run

    run()
