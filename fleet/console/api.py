"""REST API of the console: wall links (admins: list, create -- the token is shown once --,
revoke), the processes `manage.py up` supervises and the live charts' history (viewers)."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.accounts.access import can
from fleet.accounts.models import WallLink
from fleet.accounts.wall_links import wall_link_create, wall_link_revoke, wall_link_url
from fleet.console.selectors import PARTS, RANGES, history
from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline
from fleet.runtime.supervision import FAILED, RESTARTING, RUNNING, read_state


class WallLinkSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", default=None, read_only=True)

    class Meta:
        model = WallLink
        fields = [
            "id",
            "name",
            "created_by",
            "created_at",
            "expires_at",
            "revoked_at",
            "last_used_at",
        ]
        read_only_fields = ["id", "created_by", "created_at", "revoked_at", "last_used_at"]
        extra_kwargs = {"expires_at": {"help_text": "Optional: the link stops working then."}}

    def validate_expires_at(self, value):
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError("Must be in the future.")
        return value


class WallLinkList(generics.ListCreateAPIView):
    """GET: every wall link. POST {"name": ..., "expires_at": optional}: a new link; the
    response carries `url` (the token in its fragment, out of access logs) and `token` once."""

    serializer_class = WallLinkSerializer
    method_actions = {"GET": "administer", "POST": "administer"}
    queryset = WallLink.objects.select_related("created_by")

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        link, token = wall_link_create(
            name=serializer.validated_data["name"],
            actor=request.user,
            expires_at=serializer.validated_data.get("expires_at"),
        )
        url = wall_link_url(request, token)
        body = {**WallLinkSerializer(link).data, "token": token, "url": url}
        return Response(body, status=status.HTTP_201_CREATED)


class WallLinkRevoke(APIView):
    """POST: revoke a link; screens showing it are disconnected at once."""

    method_actions = {"POST": "administer"}
    serializer_class = WallLinkSerializer

    @extend_schema(request=None, responses={200: WallLinkSerializer})
    def post(self, request, pk: int):
        link = wall_link_revoke(link=get_object_or_404(WallLink, pk=pk), actor=request.user)
        return Response(WallLinkSerializer(link).data)


class ProcessSerializer(serializers.Serializer):
    name = serializers.CharField()
    state = serializers.ChoiceField(choices=[RUNNING, RESTARTING, FAILED])
    pid = serializers.IntegerField(allow_null=True)
    restarts = serializers.IntegerField()
    crashes = serializers.IntegerField(help_text="Crashes within the restart window")
    last_exit = serializers.CharField(help_text="How it last ended, e.g. 'exited with code 1'")
    since = serializers.FloatField(help_text="Unix time of the last state change")
    node = serializers.CharField(help_text="The node it serves as worker, if any")


class ProcessesSerializer(serializers.Serializer):
    supervised = serializers.BooleanField(help_text="Whether `manage.py up` runs this install")
    processes = ProcessSerializer(many=True)


class Processes(APIView):
    """GET: the processes `manage.py up` supervises on this machine, and which of them are
    restarting or were given up on. Without `up` (compose, a fleet): supervised is false."""

    method_actions = {"GET": "view"}

    @extend_schema(responses=ProcessesSerializer)
    def get(self, request):
        state = read_state(settings.DATA_DIR)
        children = state.get("children", []) if state else []
        body = {"supervised": state is not None, "processes": children}
        return Response(ProcessesSerializer(body).data)


class SeriesQuery(serializers.Serializer):
    range = serializers.ChoiceField(choices=list(RANGES), default="1h")
    parts = serializers.CharField(
        required=False, help_text=f"Comma-separated subset of {', '.join(PARTS)} (default: all)"
    )

    def validate_parts(self, value: str) -> tuple[str, ...]:
        parts = tuple(p for p in value.split(",") if p)
        unknown = sorted(set(parts) - set(PARTS))
        if unknown or not parts:
            raise serializers.ValidationError(f"Choose among {', '.join(PARTS)}.")
        return parts


class ChangeMarkerSerializer(serializers.Serializer):
    ts = serializers.FloatField(help_text="Unix time of the change")
    actor = serializers.CharField()
    action = serializers.CharField()
    text = serializers.CharField(help_text="What changed, e.g. 'k 4 → 2'")


class SeriesSerializer(serializers.Serializer):
    range = serializers.CharField()
    since = serializers.FloatField()
    series = serializers.DictField(
        required=False, help_text="Rollup figures: t (unix s) and one list per field"
    )
    rates = serializers.DictField(
        required=False, help_text="t, requests_per_s, error_rate (from the generation records)"
    )
    markers = ChangeMarkerSerializer(many=True, required=False)
    slo = serializers.DictField(
        required=False, help_text="The pipeline's SLOs: itl_p99_ms, ttft_p99_ms"
    )


SCOPES = {"fleet": None, "pipeline": Pipeline, "node": Node}


class Series(APIView):
    """GET ?range=5m|1h|6h|24h: a live chart's history for the fleet (id 0), a pipeline or a
    node, read from the rollups (10 s buckets up to 6 h, 5 min beyond), with request and
    error rates, the configuration changes in that range (audit log) and the SLOs."""

    method_actions = {"GET": "view"}

    @extend_schema(parameters=[SeriesQuery], responses=SeriesSerializer)
    def get(self, request, scope: str, pk: int):
        if scope not in SCOPES:
            raise NotFound("No such scope: fleet, pipeline or node.")
        query = SeriesQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        model = SCOPES[scope]
        obj = get_object_or_404(model, pk=pk) if model is not None else None
        if not can(request.user, "view", obj):
            raise PermissionDenied()
        data = query.validated_data
        body = history(scope, obj, data["range"], data.get("parts") or PARTS)
        return Response(SeriesSerializer(body).data)
