"""Celery adapters of the planner (thin). Beat runs `planner_auto_mode` on the control queue."""

from celery import shared_task

from fleet.planner import auto


@shared_task(name="tandem.planner.auto_mode", ignore_result=True, time_limit=120)
def planner_auto_mode() -> int:
    """One auto-mode pass over the pipelines that have it on; returns changes applied."""
    return sum(1 for d in auto.run_auto_mode() if d.applied)
