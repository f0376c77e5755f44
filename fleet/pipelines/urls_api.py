"""REST routes of the pipelines app (mounted at /api/v1/), and the node state actions
`nodes/<id>/drain|return`, which change what a pipeline may route to."""

from django.urls import path, re_path

from fleet.nodes.api import ID_REGEX
from fleet.pipelines import api, api_placements

app_name = "pipelines-api"

urlpatterns = [
    path("pipelines", api.PipelineList.as_view(), name="list"),
    path("pipelines/<int:pk>", api.PipelineDetail.as_view(), name="detail"),
    path("pipelines/<int:pk>/revisions", api.RevisionList.as_view(), name="revisions"),
    path(
        "pipelines/<int:pk>/placements", api_placements.PlacementList.as_view(), name="placements"
    ),
    path("pipelines/<int:pk>/audit", api.AuditList.as_view(), name="audit"),
    path("pipelines/<int:pk>/place", api.Place.as_view(), name="place"),
    path("pipelines/<int:pk>/k-policy", api.SetKPolicy.as_view(), name="k-policy"),
    path("pipelines/<int:pk>/batch-caps", api.SetBatchCaps.as_view(), name="batch-caps"),
    path("pipelines/<int:pk>/swap-draft", api.SwapDraft.as_view(), name="swap-draft"),
    path("pipelines/<int:pk>/rollback", api.Rollback.as_view(), name="rollback"),
    path("pipelines/<int:pk>/nodes/<int:node_id>/move", api.Move.as_view(), name="move"),
    path("pipelines/<int:pk>/nodes/<int:node_id>/drain", api.Drain.as_view(), name="drain"),
    path("pipelines/<int:pk>/nodes/<int:node_id>/return", api.Return.as_view(), name="return"),
    path("pipelines/<int:pk>/nodes/<int:node_id>/unplace", api.Unplace.as_view(), name="unplace"),
    re_path(rf"^nodes/(?P<pk>{ID_REGEX})/drain$", api.NodeDrain.as_view(), name="node-drain"),
    re_path(rf"^nodes/(?P<pk>{ID_REGEX})/return$", api.NodeReturn.as_view(), name="node-return"),
]
