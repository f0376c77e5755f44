from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "fleet.console"
    label = "console"
