"""REST API of the node registry (DRF views). Views parse input, call one service and
render the result; the role policy is `fleet.accounts.permissions.RolePermission`."""

from __future__ import annotations

from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.filters import OrderingFilter, SearchFilter
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from fleet.accounts.errors import Conflict
from fleet.nodes import selectors, services
from fleet.nodes.authentication import IsNodeAgentForNode
from fleet.nodes.filters import NodeFilter, ProfileFilter
from fleet.nodes.models import Node, NodeConflict
from fleet.nodes.pagination import KeysetCursorPagination
from fleet.nodes.serializers import (
    HeartbeatReplySerializer,
    HeartbeatSerializer,
    LeavingSerializer,
    NodeCreateSerializer,
    NodeRegisteredSerializer,
    NodeSerializer,
    NodeTokenIssuedSerializer,
    NodeTokenSerializer,
    NodeUpdateSerializer,
    ProfileSerializer,
    TokensRevokedSerializer,
)

ID_REGEX = "[0-9]{1,18}"  # longer ids cannot exist, and would overflow SQLite integers

IF_MATCH = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    description='The ETag you read (`"<version>"`); a stale one is refused with 409.',
)


FORCE = OpenApiParameter(
    "force",
    OpenApiTypes.BOOL,
    OpenApiParameter.QUERY,
    required=False,
    description="Retire it even if it is its pipeline's last healthy drafter or verifier.",
)


def _forced(raw: str) -> bool:
    """`?force=`: true/false (or 1/0); anything else is a 400 with the field named."""
    value = raw.strip().lower()
    if value not in ("true", "false", "1", "0"):
        raise ValidationError({"force": ["Must be true or false."]})
    return value in ("true", "1")


def etag(node: Node) -> str:
    return f'"{node.version}"'


def if_match_version(request) -> int | None:
    raw = request.headers.get("If-Match", "").strip()
    if not raw or raw == "*":
        return None
    value = raw.removeprefix("W/").strip('"')
    if not value.isdigit():
        raise ValidationError({"If-Match": ['Send the ETag you read, e.g. "3".']})
    return int(value)


def expected_version(request, body_version: int | None = None) -> int | None:
    header = if_match_version(request)
    if header is not None and body_version is not None and header != body_version:
        raise Conflict("If-Match and version disagree; send the version you read.")
    return body_version if body_version is not None else header


class RegistryErrorsMixin:
    """Illegal transitions, stale versions and other registry conflicts are 409 with the
    reason."""

    def handle_exception(self, exc):
        if isinstance(exc, NodeConflict):
            exc = Conflict(detail=str(exc), code=exc.code)
        return super().handle_exception(exc)


def node_response(node: Node, *, status_code: int = 200, serializer=NodeSerializer, **extra):
    data = serializer(node).data
    data.update(extra)
    return Response(data, status=status_code, headers={"ETag": etag(node)})


class NodeViewSet(
    RegistryErrorsMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Nodes: everyone with a role reads; admins register, edit and retire (DELETE = retire).
    The list pages by cursor (`next`/`previous`, `?limit=`), ordered by one field and id:
    the same few queries for any page of any fleet (fleet/nodes/pagination.py)."""

    queryset = selectors.node_queryset()
    serializer_class = NodeSerializer
    pagination_class = KeysetCursorPagination
    filter_backends = [DjangoFilterBackend, SearchFilter, OrderingFilter]
    filterset_class = NodeFilter
    search_fields = ["name"]
    ordering_fields = ["name", "state", "last_seen", "created", "updated"]
    ordering = ["name"]
    lookup_value_regex = ID_REGEX
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    method_actions = {"POST": "administer", "PATCH": "administer", "DELETE": "administer"}

    def retrieve(self, request, *args, **kwargs):
        return node_response(self.get_object())

    @extend_schema(request=NodeCreateSerializer, responses={201: NodeRegisteredSerializer})
    def create(self, request, *args, **kwargs):
        serializer = NodeCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        node, plain = services.node_register(**serializer.validated_data)
        return node_response(
            node, status_code=status.HTTP_201_CREATED, serializer=NodeSerializer, token=plain
        )

    @extend_schema(
        request=NodeUpdateSerializer, responses={200: NodeSerializer}, parameters=[IF_MATCH]
    )
    def partial_update(self, request, *args, **kwargs):
        node = self.get_object()
        serializer = NodeUpdateSerializer(node, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        changes = dict(serializer.validated_data)
        version = expected_version(request, changes.pop("version", None))
        node = services.node_update(node=node, expected_version=version, **changes)
        return node_response(node)

    @extend_schema(responses={204: None}, parameters=[IF_MATCH, FORCE])
    def destroy(self, request, *args, **kwargs):
        """Retires the node (a soft delete: it stays listed as retired, its tokens die);
        refused (409) while it is a pipeline's last healthy drafter or verifier, unless
        `?force=true`."""
        services.node_retire(
            node=self.get_object(),
            actor=request.user,
            expected_version=expected_version(request),
            force=_forced(request.query_params.get("force", "false")),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class NodeRetireView(RegistryErrorsMixin, GenericAPIView):
    """Retire one node: POST with no body (If-Match optional). Draining and returning are
    served by the pipelines app (fleet/pipelines/api.py): they change what a pipeline may
    route to."""

    queryset = selectors.node_queryset()
    serializer_class = NodeSerializer
    write_action = "administer"

    @extend_schema(
        request=LeavingSerializer, responses={200: NodeSerializer}, parameters=[IF_MATCH]
    )
    def post(self, request, pk):
        body = LeavingSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        node = services.node_retire(
            node=self.get_object(),
            actor=request.user,
            expected_version=expected_version(request),
            force=body.validated_data["force"],
        )
        return node_response(node)


class NodeTokenListView(GenericAPIView):
    """The node's tokens (prefixes and dates only: secrets are never stored)."""

    queryset = selectors.node_queryset()
    serializer_class = NodeTokenSerializer
    pagination_class = None
    method_actions = {"GET": "administer"}

    def get(self, request, pk):
        tokens = selectors.node_tokens(node=self.get_object())
        return Response(NodeTokenSerializer(tokens, many=True).data)


class NodeTokenRotateView(RegistryErrorsMixin, GenericAPIView):
    queryset = selectors.node_queryset()
    serializer_class = NodeTokenIssuedSerializer
    write_action = "administer"

    @extend_schema(request=None, responses={201: NodeTokenIssuedSerializer})
    def post(self, request, pk):
        """Revokes the node's tokens and issues a new one, shown once."""
        token, plain = services.node_token_rotate(node=self.get_object(), actor=request.user)
        data = NodeTokenIssuedSerializer(token).data
        data["token"] = plain
        return Response(data, status=status.HTTP_201_CREATED)


class NodeTokenRevokeView(GenericAPIView):
    queryset = selectors.node_queryset()
    serializer_class = TokensRevokedSerializer
    write_action = "administer"

    @extend_schema(request=LeavingSerializer, responses={200: TokensRevokedSerializer})
    def post(self, request, pk):
        """Revokes every token of the node; its agent gets 401 until a new one is issued.
        Refused (409) while it is a pipeline's last healthy drafter or verifier, unless
        `force`."""
        body = LeavingSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        count = services.node_token_revoke(
            node=self.get_object(), actor=request.user, force=body.validated_data["force"]
        )
        return Response({"revoked": count})


class HeartbeatView(RegistryErrorsMixin, GenericAPIView):
    """The node agent's heartbeat (node token only, own node only). The first heartbeat
    registers the agent: its version, device and address; the node comes online."""

    queryset = Node.objects.all()
    serializer_class = HeartbeatSerializer
    permission_classes = [IsNodeAgentForNode]

    @extend_schema(request=HeartbeatSerializer, responses={200: HeartbeatReplySerializer})
    def post(self, request, pk):
        serializer = HeartbeatSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        node = services.node_heartbeat(node=request.user.node, **serializer.validated_data)
        reply = HeartbeatReplySerializer(node, context={"token": request.auth})
        return Response(reply.data)


class ProfileViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """The hardware catalogue: everyone with a role reads; admins add and edit."""

    queryset = selectors.profile_list()
    serializer_class = ProfileSerializer
    filterset_class = ProfileFilter
    ordering_fields = ["slug", "kind", "vendor"]
    ordering = ["slug"]
    lookup_field = "slug"
    lookup_value_regex = "[-a-zA-Z0-9_]{1,64}"
    http_method_names = ["get", "post", "patch", "head", "options"]
    method_actions = {"POST": "administer", "PATCH": "administer"}

    def perform_create(self, serializer):
        serializer.instance = services.profile_create(**serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = services.profile_update(
            profile=serializer.instance, **serializer.validated_data
        )
