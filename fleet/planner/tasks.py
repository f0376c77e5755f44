"""Celery adapters of the planner (thin). Beat runs `planner_auto_mode` on the control queue."""

from celery import shared_task

from fleet.planner import auto, verification


@shared_task(name="tandem.planner.auto_mode", ignore_result=True, time_limit=120)
def planner_auto_mode() -> int:
    """One auto-mode pass over the pipelines that have it on; returns changes applied."""
    return sum(1 for d in auto.run_auto_mode() if d.applied)


@shared_task(name="tandem.planner.verify_applied", ignore_result=True, time_limit=60)
def planner_verify_applied() -> int:
    """Judge the applied changes whose measurement window is complete; returns how many."""
    return len(verification.run_checks())
