"""What the pipelines' REST API answers: a pipeline (with its placements bounded inline,
`api_placements`), the small result of a node action, revisions and audit events. What a
write accepts is `serializers.py`'s."""

from __future__ import annotations

from django.urls import reverse
from rest_framework import serializers

from fleet.audit.models import AuditEvent
from fleet.nodes.models import Node
from fleet.pipelines import api_placements
from fleet.pipelines.api_placements import PlacementSerializer
from fleet.pipelines.models import CONFIG_FIELDS, Pipeline, PipelineRevision


class PipelineSerializer(serializers.ModelSerializer):
    """A pipeline with at most `api_placements.PLACEMENTS_INLINE` of its placements inline
    (by role, then node name); `placements_url` pages through all of them."""

    placements = serializers.SerializerMethodField()
    placements_count = serializers.SerializerMethodField()
    placements_truncated = serializers.SerializerMethodField()
    placements_url = serializers.SerializerMethodField()

    def get_placements(self, obj) -> list[dict]:
        return list(PlacementSerializer(api_placements.inline_placements(obj), many=True).data)

    def get_placements_count(self, obj) -> int:
        return api_placements.placements_count(obj)

    def get_placements_truncated(self, obj) -> bool:
        return self.get_placements_count(obj) > len(api_placements.inline_placements(obj))

    def get_placements_url(self, obj) -> str:
        return reverse("pipelines-api:placements", kwargs={"pk": obj.pk})

    class Meta:
        model = Pipeline
        fields = [
            "id",
            "name",
            "description",
            *CONFIG_FIELDS,
            "simulated",
            "version",
            "created_at",
            "updated_at",
            "placements",
            "placements_count",
            "placements_truncated",
            "placements_url",
        ]
        read_only_fields = ["id", "version", "created_at", "updated_at"]


class PipelineRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Pipeline
        fields = ["id", "name", "version"]


class NodeRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Node
        fields = ["id", "name", "state", "version"]


class NodeActionResultSerializer(serializers.Serializer):
    """What a node action answers, the same size whatever the pipeline's: the pipeline's id,
    name and new version (its ETag), the node, its placement after the action (null once
    unplaced) and, for a move, the pipeline it left. GET the pipeline for all of it."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    version = serializers.IntegerField()
    node = NodeRefSerializer()
    placement = PlacementSerializer(allow_null=True)
    from_pipeline = PipelineRefSerializer(required=False)


class RevisionSerializer(serializers.ModelSerializer):
    class Meta:
        model = PipelineRevision
        fields = ["version", "config", "created_at"]


class AuditEventSerializer(serializers.ModelSerializer):
    node_name = serializers.CharField(source="node.name", read_only=True, default=None)

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "actor_label",
            "action",
            "pipeline",
            "node",
            "node_name",
            "before",
            "after",
            "reason",
            "created_at",
        ]
