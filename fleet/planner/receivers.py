"""The planner's answers to other apps' signals (connected in `PlannerConfig.ready`): an
operator's k policy change is verified like the planner's own Apply. Here, not in
`verification`, because it reads the planner's context (`services`), which opens checks
through `verification` itself."""

from __future__ import annotations

from fleet.pipelines.services import PLANNER
from fleet.planner import services
from fleet.planner.recommend import predict_policy
from fleet.planner.verification import open_check


def on_change_committed(sender, *, event, **kwargs) -> None:
    """An operator's k policy change (REST, console) is verified like the planner's own:
    measured for a window, rolled back if it lost. The planner opens its checks itself."""
    if event.action != "set_k_policy" or event.actor_label == PLANNER or event.pipeline is None:
        return
    previous = (event.before or {}).get("k_policy")
    if not previous:
        return
    predicted = None
    try:
        ctx = services.context(pipeline=event.pipeline)
        batch = services.operating_batch(event.pipeline, ctx.measured)
        predicted = predict_policy(ctx.model, event.pipeline.k_policy, batch).goodput_tps
    except ValueError:  # nothing to model it by: the measurement still decides
        pass
    open_check(
        pipeline=event.pipeline,
        event=event,
        what="k_policy",
        previous={"k_policy": previous},
        predicted_tps=predicted,
    )
