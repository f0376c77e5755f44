from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    name = "fleet.pipelines"
    label = "pipelines"
