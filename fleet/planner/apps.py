from django.apps import AppConfig


class PlannerConfig(AppConfig):
    name = "fleet.planner"
    label = "planner"
