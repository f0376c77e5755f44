"""Celery adapters of telemetry (thin: call a service)."""

from celery import shared_task


@shared_task(name="tandem.telemetry.evaluate_alerts", ignore_result=True, time_limit=30)
def telemetry_evaluate_alerts() -> int:
    """Run by celery beat: the alert conditions evaluated, firing/resolved recorded."""
    from fleet.telemetry.alert_state import sync

    return len(sync())
