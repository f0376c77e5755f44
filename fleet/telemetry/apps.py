from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "fleet.telemetry"
    label = "telemetry"

    def ready(self) -> None:
        from fleet.audit.signals import change_committed
        from fleet.telemetry.changes import on_change_committed

        change_committed.connect(on_change_committed, dispatch_uid="telemetry.change-markers")
