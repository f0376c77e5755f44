from django.apps import AppConfig


class NodesConfig(AppConfig):
    name = "fleet.nodes"
    label = "nodes"
