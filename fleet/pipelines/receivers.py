"""The pipelines app's answers to the nodes app's signals (connected in `PipelinesConfig`)."""

from __future__ import annotations

from fleet.pipelines.models import Placement
from fleet.pipelines.rules import check_keeps_healthy


def keep_pipelines_healthy(sender, *, node, force: bool, **_kwargs) -> None:
    """A node leaving for good may not take a pipeline's last healthy drafter or verifier
    with it (`rules.check_keeps_healthy`: 409 unless `force`)."""
    for placement in Placement.objects.filter(node=node).select_related("pipeline"):
        check_keeps_healthy(placement.pipeline, leaving=node, force=force)
