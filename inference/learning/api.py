"""REST: learning from traffic of a pipeline (mounted under /api/v1/pipelines/<id>/).

- `learning`: GET the policy and what it has captured ("view"); PATCH it ("operate",
  audited);
- `draft-versions`: GET the versions with their measured acceptance ("view"); POST trains
  the next one now ("operate", audited; 400 while one trains or is canaried);
- `captured-pairs`: GET the pairs ("view"); their tokens only to those who may read the
  generation's content (`can(user, "read_content")`), null for everyone else.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.pipelines.models import Pipeline
from inference.learning import selectors, services
from inference.learning.models import CapturedPair, DraftVersion, LearningPolicy


class PolicySerializer(serializers.ModelSerializer):
    pairs = serializers.SerializerMethodField()
    new_pairs = serializers.SerializerMethodField()

    def get_pairs(self, obj) -> int:
        return selectors.pairs_of(obj.pipeline).count()

    def get_new_pairs(self, obj) -> int:
        return services.new_pairs(obj.pipeline)

    class Meta:
        model = LearningPolicy
        fields = [*services.POLICY_FIELDS, "captured_until", "pairs", "new_pairs"]
        read_only_fields = ["captured_until"]


class PolicyInput(serializers.Serializer):
    enabled = serializers.BooleanField(required=False)
    retention_hours = serializers.IntegerField(required=False, min_value=1, max_value=24 * 365)
    min_pairs = serializers.IntegerField(required=False, min_value=1, max_value=100_000)
    max_pairs = serializers.IntegerField(required=False, min_value=1, max_value=100_000)
    train_minutes = serializers.FloatField(required=False, min_value=0.05, max_value=120)
    canary_fraction = serializers.FloatField(required=False, min_value=0.01, max_value=0.5)
    promote_margin = serializers.FloatField(required=False, min_value=0.0, max_value=1.0)
    min_canary_tokens = serializers.IntegerField(required=False, min_value=1, max_value=10**7)
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500)


class DraftVersionSerializer(serializers.ModelSerializer):
    parent_version = serializers.SerializerMethodField()

    def get_parent_version(self, obj) -> int | None:
        return obj.parent.number if obj.parent is not None else None

    class Meta:
        model = DraftVersion
        fields = [
            "number",
            "parent_version",
            "path",
            "status",
            "created_at",
            "decided_at",
            "train_pairs",
            "heldout_agreement_before",
            "heldout_agreement",
            "canary_acceptance",
            "baseline_acceptance",
            "canary_goodput_tps",
            "baseline_goodput_tps",
            "served_acceptance",
        ]


class PairSerializer(serializers.ModelSerializer):
    content_visible = serializers.SerializerMethodField()
    prompt_token_count = serializers.SerializerMethodField()
    output_token_count = serializers.SerializerMethodField()

    def get_content_visible(self, obj) -> bool:
        request = self.context.get("request")
        return request is not None and selectors.readable(obj, request.user)

    def get_prompt_token_count(self, obj) -> int:
        return len(obj.prompt_tokens or [])

    def get_output_token_count(self, obj) -> int:
        return len(obj.output_tokens or [])

    def to_representation(self, obj):
        data = super().to_representation(obj)
        if not data["content_visible"]:
            data["prompt_tokens"] = data["output_tokens"] = None
        return data

    class Meta:
        model = CapturedPair
        fields = [
            "id",
            "generation",
            "created_at",
            "content_visible",
            "prompt_token_count",
            "output_token_count",
            "prompt_tokens",
            "output_tokens",
        ]


def _pipeline(pk) -> Pipeline:
    return get_object_or_404(Pipeline, pk=pk)


class Learning(APIView):
    @extend_schema(responses=PolicySerializer)
    def get(self, request, pk: int):
        return Response(PolicySerializer(selectors.policy_of(_pipeline(pk))).data)

    @extend_schema(request=PolicyInput, responses=PolicySerializer)
    def patch(self, request, pk: int):
        pipeline = _pipeline(pk)
        data = PolicyInput(data=request.data)
        data.is_valid(raise_exception=True)
        changes = dict(data.validated_data)
        reason = changes.pop("reason", "")
        policy = services.learning_configure(
            pipeline_id=pipeline.pk, actor=request.user, changes=changes, reason=reason
        )
        return Response(PolicySerializer(policy).data)


class DraftVersions(generics.ListAPIView):
    serializer_class = DraftVersionSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return DraftVersion.objects.none()
        return selectors.versions_of(_pipeline(self.kwargs["pk"]))

    @extend_schema(request=None, responses={202: DraftVersionSerializer})
    def post(self, request, pk: int):
        pipeline = _pipeline(pk)
        version = services.training_start(
            pipeline_id=pipeline.pk, actor=request.user, reason="started by an operator"
        )
        return Response(DraftVersionSerializer(version).data, status=status.HTTP_202_ACCEPTED)


class CapturedPairs(generics.ListAPIView):
    serializer_class = PairSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return CapturedPair.objects.none()
        return selectors.pairs_of(_pipeline(self.kwargs["pk"]))
