"""`GET /api/v1/node-session`: what a node worker needs to start, for its node token only.

A node worker holds no database credentials (DESIGN.md, walls): it starts with REDIS_URL,
TANDEM_API_URL and its node token, and asks here which node it is, where it is placed (the
pipeline's configuration: models, k policy, batch caps) and the key it signs its reports and
telemetry with (`fleet.nodes.signing`, bound to this node and this token).
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import permissions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.nodes.authentication import NodeAgent, NodeTokenAuthentication
from fleet.nodes.signing import token_key
from fleet.pipelines.models import Placement


class IsNodeAgent(permissions.BasePermission):
    message = "This endpoint is for a node's own agent, with its node token."

    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, NodeAgent)


class NodeSessionView(APIView):
    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]

    @extend_schema(
        responses={
            200: inline_serializer(
                "NodeSession",
                {
                    "node": serializers.IntegerField(),
                    "name": serializers.CharField(),
                    "profile": serializers.DictField(),
                    "placement": serializers.DictField(allow_null=True),
                    "signing_key": serializers.CharField(),
                    "heartbeat_period_s": serializers.IntegerField(),
                },
            )
        }
    )
    def get(self, request):
        node = request.user.node
        placement = Placement.objects.select_related("pipeline").filter(node=node).first()
        return Response(
            {
                "node": node.pk,
                "name": node.name,
                "profile": {"idle_w": node.profile.idle_w, "tdp_w": node.profile.tdp_w},
                "placement": None
                if placement is None
                else {
                    "role": placement.role,
                    "pipeline": placement.pipeline_id,
                    "config": placement.pipeline.config(),
                },
                "signing_key": token_key(node.pk, request.auth),
                "heartbeat_period_s": settings.HEARTBEAT_PERIOD_S,
            }
        )
