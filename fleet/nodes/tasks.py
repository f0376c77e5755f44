"""Celery adapters of the node registry (thin: call a service)."""

from celery import shared_task

from fleet.nodes import services


@shared_task(name="tandem.nodes.mark_lost", ignore_result=True, time_limit=60)
def nodes_mark_lost() -> int:
    """Run by celery beat every heartbeat period: online/draining nodes whose heartbeat
    aged past period x tolerance become lost."""
    return len(services.nodes_mark_lost())
