"""REST of the planner: recommendation, preview, apply (operators), what-if. All figures
are modeled (`"modeled": true` in every answer)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.pipelines.api import expected_version
from fleet.pipelines.models import Pipeline
from fleet.planner import services, whatif


class Recommendation(APIView):
    @extend_schema(responses=OpenApiTypes.OBJECT, description="Current vs recommended (modeled).")
    def get(self, request, pk: int):
        return Response(services.recommendation(pipeline=get_object_or_404(Pipeline, pk=pk)))


class Preview(APIView):
    """POST {"action": "set_k_policy", "k_policy": {...}} etc.; changes nothing."""

    method_actions = {"POST": "view"}

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(self, request, pk: int):
        pipeline = get_object_or_404(Pipeline, pk=pk)
        if not isinstance(request.data, dict):
            raise serializers.ValidationError({"action": "send a JSON object"})
        return Response(services.preview(pipeline=pipeline, action=dict(request.data)))


class ApplyInput(serializers.Serializer):
    what = serializers.ChoiceField(["k_policy", "split"])
    version = serializers.IntegerField(min_value=1, required=False)
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class Apply(APIView):
    write_action = "operate"

    @extend_schema(request=ApplyInput, responses=OpenApiTypes.OBJECT)
    def post(self, request, pk: int):
        pipeline = get_object_or_404(Pipeline, pk=pk)
        data = ApplyInput(data=request.data)
        data.is_valid(raise_exception=True)
        result = services.apply(
            pipeline=pipeline,
            what=data.validated_data["what"],
            actor=request.user,
            expected_version=expected_version(request, data.validated_data),
            reason=data.validated_data["reason"],
        )
        return Response(result)


class WhatIfInput(serializers.Serializer):
    move_to_verify = serializers.IntegerField(
        min_value=0, max_value=100_000, required=False, default=0
    )
    move_to_draft = serializers.IntegerField(
        min_value=0, max_value=100_000, required=False, default=0
    )
    add_drafters = serializers.IntegerField(
        min_value=0, max_value=100_000, required=False, default=0
    )
    add_drafter_profile = serializers.SlugField(required=False, allow_blank=True)
    add_verifiers = serializers.IntegerField(
        min_value=0, max_value=100_000, required=False, default=0
    )
    add_verifier_profile = serializers.SlugField(required=False, allow_blank=True)
    prices = serializers.DictField(child=serializers.FloatField(min_value=0), required=False)
    include_simulated = serializers.BooleanField(required=False, default=True)


class WhatIf(APIView):
    method_actions = {"POST": "view"}

    @extend_schema(request=WhatIfInput, responses=OpenApiTypes.OBJECT)
    def post(self, request):
        data = WhatIfInput(data=request.data)
        data.is_valid(raise_exception=True)
        changes = dict(data.validated_data)
        include = changes.pop("include_simulated")
        return Response(whatif.what_if(changes, include_simulated=include))
