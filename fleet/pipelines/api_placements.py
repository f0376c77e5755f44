"""A pipeline's placements in the REST API, bounded at fleet scale.

A pipeline's JSON (GET, list, configuration changes) carries at most PLACEMENTS_INLINE of its
placements (by role, then node name), with `placements_count`, `placements_truncated` and
`placements_url`; `GET /api/v1/pipelines/<id>/placements` pages through all of them
(`PlacementSerializer`: a placement's shape in both). Every
placement of a 2,500-node pipeline inline was ~410 KB and 0.4 s per answer.
"""

from __future__ import annotations

from django.db.models import F, QuerySet, Window
from django.db.models.functions import RowNumber
from django.shortcuts import get_object_or_404
from rest_framework import generics, serializers

from fleet.pipelines.models import Pipeline, Placement

PLACEMENTS_INLINE = 100
INLINE_ATTR = "inline_placements"  # where `attach_placements` leaves them on a Pipeline


def _ordered() -> QuerySet[Placement]:
    return Placement.objects.select_related("node__profile").order_by("role", "node__name", "id")


def attach_placements(pipelines) -> None:
    """Set `inline_placements` on each pipeline: its first PLACEMENTS_INLINE placements, for
    any number of pipelines in one query."""
    pipelines = list(pipelines)
    if not pipelines:
        return
    ranked = (
        Placement.objects.filter(pipeline__in=[p.pk for p in pipelines])
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("pipeline_id")],
                order_by=[F("role").asc(), F("node__name").asc(), F("id").asc()],
            )
        )
        .filter(rank__lte=PLACEMENTS_INLINE)
        .select_related("node__profile")
        .order_by("pipeline_id", "rank")
    )
    by_pipeline: dict[int, list[Placement]] = {p.pk: [] for p in pipelines}
    for placement in ranked:
        by_pipeline[placement.pipeline_id].append(placement)
    for p in pipelines:
        setattr(p, INLINE_ATTR, by_pipeline[p.pk])


def inline_placements(pipeline: Pipeline) -> list[Placement]:
    if not hasattr(pipeline, INLINE_ATTR):
        attach_placements([pipeline])
    return getattr(pipeline, INLINE_ATTR)


def placements_count(pipeline: Pipeline) -> int:
    drafters, verifiers = (
        getattr(pipeline, "n_drafters", None),
        getattr(pipeline, "n_verifiers", None),
    )
    if drafters is None or verifiers is None:
        return pipeline.placements.count()
    return drafters + verifiers


class PlacementSerializer(serializers.ModelSerializer):
    node_name = serializers.CharField(source="node.name", read_only=True)
    node_state = serializers.CharField(source="node.state", read_only=True)
    profile = serializers.CharField(source="node.profile.slug", read_only=True)
    simulated = serializers.BooleanField(source="node.simulated", read_only=True)

    class Meta:
        model = Placement
        fields = ["node", "node_name", "node_state", "profile", "simulated", "role", "created_at"]


class PlacementList(generics.ListAPIView):
    """Every placement of a pipeline, by role then node name, paginated."""

    def get_serializer_class(self):
        return PlacementSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation
            return Placement.objects.none()
        pipeline = get_object_or_404(Pipeline, pk=self.kwargs["pk"])
        return _ordered().filter(pipeline=pipeline)
