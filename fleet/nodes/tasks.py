"""Celery adapters of the node registry (thin: call a service)."""

from celery import shared_task

from fleet.nodes import services


@shared_task(name="tandem.nodes.mark_lost", ignore_result=True, time_limit=60)
def nodes_mark_lost() -> int:
    """Run by celery beat every heartbeat period: online/draining nodes whose heartbeat
    aged past period x tolerance become lost."""
    return len(services.nodes_mark_lost())


@shared_task(name="tandem.nodes.redis_acl_resync", ignore_result=True, time_limit=60)
def nodes_redis_acl_resync() -> int:
    """Run by celery beat: node users set again when Redis came back as a new process."""
    from fleet.nodes.redis_acl import resync_after_restart

    return resync_after_restart()
