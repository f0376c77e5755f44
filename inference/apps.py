from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    label = "inference"

    def ready(self) -> None:
        from fleet.pipelines.signals import config_committed
        from inference import receivers

        config_committed.connect(
            receivers.push_committed_config, dispatch_uid="inference.push_committed_config"
        )
