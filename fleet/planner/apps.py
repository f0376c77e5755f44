from django.apps import AppConfig


class PlannerConfig(AppConfig):
    name = "fleet.planner"
    label = "planner"

    def ready(self) -> None:
        from fleet.audit.signals import change_committed
        from fleet.planner.receivers import on_change_committed

        change_committed.connect(on_change_committed, dispatch_uid="planner.verify-k-changes")
