from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    name = "fleet.pipelines"
    label = "pipelines"

    def ready(self) -> None:
        from fleet.nodes.signals import node_leaving
        from fleet.pipelines.receivers import keep_pipelines_healthy

        node_leaving.connect(keep_pipelines_healthy, dispatch_uid="pipelines-keep-healthy")
