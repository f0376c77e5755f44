"""REST routes of the data plane, mounted under /api/v1/."""

from django.urls import path

from inference.serving import api, api_stream, api_timeline
from inference.serving.node_session import NodeSessionView

urlpatterns = [
    path("node-session", NodeSessionView.as_view(), name="api-node-session"),
    path("generations", api.GenerationListCreate.as_view(), name="api-generation-list"),
    path(
        "generations/<uuid:generation_id>",
        api.GenerationDetail.as_view(),
        name="api-generation-detail",
    ),
    path(
        "generations/<uuid:generation_id>/timeline",
        api_timeline.GenerationTimeline.as_view(),
        name="api-generation-timeline",
    ),
    path(
        "generations/<uuid:generation_id>/stream",
        api_stream.generation_stream,
        name="api-generation-stream",
    ),
]
