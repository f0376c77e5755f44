"""What the data plane does when the control plane's apps say something happened: their
signals, connected in `InferenceConfig.ready` (the apps below never import the data plane).
"""

from __future__ import annotations

from fleet.pipelines.models import Pipeline
from inference.services import push_pipeline_config


def push_committed_config(
    sender, *, pipeline: Pipeline, node_ids: list[int] | None = None, **kwargs
) -> None:
    """`fleet.pipelines.signals.config_committed`: the workers get the committed configuration
    (every placed node, or `node_ids`). Errors propagate: the outbox keeps the push."""
    push_pipeline_config(pipeline, node_ids=node_ids)
