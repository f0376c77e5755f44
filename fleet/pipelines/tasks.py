"""Celery adapters of the pipelines app (thin: call a service)."""

from celery import shared_task

from fleet.pipelines import outbox


@shared_task(name="tandem.pipelines.deliver_pushes", ignore_result=True, time_limit=60)
def deliver_pushes() -> dict:
    """Run by celery beat every 2 s: configuration pushes still in the outbox (Redis was
    unreachable when their change was committed) are sent, oldest first."""
    return outbox.deliver_pending()
