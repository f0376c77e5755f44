"""`GET /api/v1/generations/{id}/timeline`: the path a request took (`inference.timeline`),
to operators and to who may read the generation (`timeline.may_see`)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import generics, serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from inference.serving.api import RenderedOnLane, generations
from inference.timeline import may_see, timeline

_Timeline = inline_serializer(
    "GenerationTimeline",
    {
        "generation": serializers.UUIDField(),
        "pipeline": serializers.IntegerField(),
        "state": serializers.CharField(),
        "created_at": serializers.DateTimeField(),
        "events": serializers.ListField(child=serializers.DictField()),
        "rounds": serializers.ListField(child=serializers.DictField()),
        "summary": serializers.DictField(),
    },
)


class GenerationTimeline(RenderedOnLane, generics.RetrieveAPIView):
    """Events (queued, re-routes, claimed, prefill, first token, finish) and each verify round
    of the last attempt (k, accepted, batch, forward time), in ms after creation."""

    lookup_url_kwarg = "generation_id"

    def get_queryset(self):
        return generations()

    @extend_schema(responses={200: OpenApiResponse(_Timeline)})
    def get(self, request, *args, **kwargs):
        generation = self.get_object()
        if not may_see(request.user, generation):
            raise PermissionDenied("Only operators or who may read this generation see its path.")
        return Response(timeline(generation))
