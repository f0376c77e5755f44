"""`GET /api/v1/node-session`: what a node worker needs to start, for its node token only.

A node worker holds no database credentials (DESIGN.md, walls): it starts with REDIS_URL,
TANDEM_API_URL and its node token, and asks here which node it is, where it is placed (the
pipeline's configuration: models, k policy, batch caps, the nodes it exchanges rounds with),
the key it signs its reports and telemetry with (`fleet.nodes.signing`, bound to this node
and this token), the key the control plane signs its cancels with, and its own Redis user
(`fleet.nodes.redis_acl`: set here, with the admin connection, before it is handed out).
"""

from __future__ import annotations

import redis
from django.conf import settings
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import permissions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.accounts.secrets import digest
from fleet.nodes import redis_acl
from fleet.nodes.authentication import NodeAgent, NodeTokenAuthentication
from fleet.nodes.signing import control_key, redis_password, token_key
from fleet.pipelines.models import Placement
from inference.services import worker_config


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
                    "control_key": serializers.CharField(),
                    "redis": serializers.DictField(),
                },
            )
        }
    )
    def get(self, request):
        node = request.user.node
        placement = Placement.objects.select_related("pipeline").filter(node=node).first()
        try:
            redis_acl.sync_node(node.pk)
        except redis.RedisError:
            return Response(
                {"detail": "Redis is unavailable: the node's Redis user cannot be set. Retry."},
                status=503,
                headers={"Retry-After": "5"},
            )
        password = redis_password(node.pk, digest(request.auth))
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
                    "config": worker_config(placement.pipeline),
                    "peers": placement_peers(placement.pipeline_id),
                },
                "signing_key": token_key(node.pk, request.auth),
                "heartbeat_period_s": settings.HEARTBEAT_PERIOD_S,
                "control_key": control_key(node.pk),
                "redis": {
                    "username": redis_acl.username(node.pk),
                    "password": password,  # at the address of the node's own REDIS_URL
                },
            }
        )


def placement_peers(pipeline_id: int) -> list[int]:
    """The nodes placed in a pipeline: those a node of it exchanges round messages with."""
    return sorted(Placement.objects.filter(pipeline_id=pipeline_id).values_list("node", flat=True))
