"""Celery adapters of learning from traffic (thin: ids in, services out).

`tandem.learning.train` runs on a worker of the `train` queue (torch, the models directory,
the database: under `up`, the local train worker). `tandem.learning.tick` runs on the control
worker's beat."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="tandem.learning.train", ignore_result=True, acks_late=False)
def train_draft_version(version_id: int) -> None:
    from inference.learning.job import run

    run(version_id)


@shared_task(name="tandem.learning.tick", ignore_result=True, time_limit=120)
def learning_tick() -> None:
    from inference.learning.tick import tick

    tick()
