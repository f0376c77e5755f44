"""Node registry routes, included under /api/v1/ (no trailing slashes)."""

from django.urls import re_path
from rest_framework.routers import SimpleRouter

from fleet.nodes import api

router = SimpleRouter(trailing_slash=False)
router.register("nodes", api.NodeViewSet, basename="node")
router.register("profiles", api.ProfileViewSet, basename="profile")

NODE = rf"^nodes/(?P<pk>{api.ID_REGEX})"

urlpatterns = [
    re_path(rf"{NODE}/heartbeat$", api.HeartbeatView.as_view(), name="node-heartbeat"),
    re_path(rf"{NODE}/drain$", api.NodeDrainView.as_view(), name="node-drain"),
    re_path(rf"{NODE}/return$", api.NodeReturnView.as_view(), name="node-return"),
    re_path(rf"{NODE}/retire$", api.NodeRetireView.as_view(), name="node-retire"),
    re_path(rf"{NODE}/tokens$", api.NodeTokenListView.as_view(), name="node-tokens"),
    re_path(rf"{NODE}/token/rotate$", api.NodeTokenRotateView.as_view(), name="node-token-rotate"),
    re_path(rf"{NODE}/token/revoke$", api.NodeTokenRevokeView.as_view(), name="node-token-revoke"),
    *router.urls,
]
