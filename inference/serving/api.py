"""REST API for generations: `/api/v1/generations` (create, list, follow, cancel).

Roles: creating needs "generate" (operators, admins); reading needs "view"; cancelling needs
admin, or being the generation's owner. A generation's text (prompt, output, stop sequences,
its stream) is shown only to those who may "read_content" it (fleet/accounts/access.py):
everyone else with "view" gets its metadata and figures, with the text fields null.

DELETE of a generation that already ended is idempotent: 200 with the generation as it is
(no error, nothing changes). DELETE of a live one asks the data plane to cancel it and
answers 202 with the generation's state after the request (normally `cancelled`).
Its event stream is `api_stream.py`'s.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import django_filters
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import generics, serializers, status
from rest_framework.exceptions import APIException, PermissionDenied
from rest_framework.response import Response
from rest_framework.reverse import reverse

from fleet.accounts.access import can
from inference import services, wire
from inference.models import Generation, GenerationState
from inference.serving import readiness
from inference.serving.request_rules import (
    MAX_STOP_SEQUENCES,
    SEED_MAX,
    TEMPERATURE_MAX,
    RequestError,
    pipeline_named,
    prepare,
    stop_list,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from fleet.nodes.models import Node
    from fleet.pipelines.models import Pipeline

log = logging.getLogger(__name__)


# submission's parameter names -> this API's field names
FIELD_OF_PARAM: dict[str | None, str | None] = {"model": "pipeline"}


class NoCapacityError(APIException):
    """503 + Retry-After (DRF's handler sends `wait` as Retry-After): the pipeline is warming
    up (its models are being trained or converted) or short of healthy workers."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "No drafter/verifier pair of this pipeline can take a generation now."
    default_code = "no_capacity"

    def __init__(self, state: readiness.NotReady):
        super().__init__(state.message, "model_not_ready" if state.warming_up else "no_capacity")
        self.wait = state.retry_after_s


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "string"}, "maxItems": MAX_STOP_SEQUENCES},
        ]
    }
)
class StopField(serializers.Field):
    """A string or a list of strings (`request_rules.stop_list`); always a list inside."""

    def to_internal_value(self, data):
        try:
            return stop_list(data)
        except RequestError as exc:
            raise serializers.ValidationError(exc.message, code=exc.code) from exc

    def to_representation(self, value):
        return value


class JsonBooleanField(serializers.BooleanField):
    """true or false, as JSON has them ("yes" and 1 are refused, as /v1 refuses them)."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class GenerationCreateSerializer(serializers.Serializer):
    """Types here; the rules (ranges, context length) are `request_rules.prepare`'s, the same
    for /v1, and come back as errors of the field they name."""

    pipeline = serializers.SlugField(max_length=64)
    prompt = serializers.CharField(trim_whitespace=False, max_length=1_000_000)
    max_tokens = serializers.IntegerField(
        required=False, help_text="At least 1; default: the rest of the model's context."
    )
    temperature = serializers.FloatField(
        required=False, help_text=f"0..{TEMPERATURE_MAX:g} (default 1; 0 is greedy)."
    )
    top_k = serializers.IntegerField(required=False, help_text="0 (off, the default) or more.")
    top_p = serializers.FloatField(required=False, help_text="Greater than 0, at most 1.")
    seed = serializers.IntegerField(required=False, help_text=f"0..{SEED_MAX}.")
    stop = StopField(required=False)
    ignore_eos = JsonBooleanField(
        required=False,
        help_text="Generate max_tokens whatever the model's end of sequence says (vLLM's "
        "extension; default false).",
    )

    def validate(self, attrs):
        # a field this API does not know is refused, not dropped: a client that asked for
        # something (ignore_eos, before it was a field here) must not get something else
        unknown = sorted(set(getattr(self, "initial_data", {}) or {}) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        pipeline = None
        try:
            pipeline = pipeline_named(attrs["pipeline"])
            return prepare(
                pipeline=pipeline,
                prompt=attrs["prompt"],
                max_tokens=attrs.get("max_tokens"),
                default_max_tokens=None,
                temperature=attrs.get("temperature"),
                top_p=attrs.get("top_p"),
                top_k=attrs.get("top_k"),
                seed=attrs.get("seed"),
                stop=attrs.get("stop"),
                ignore_eos=attrs.get("ignore_eos"),
            )
        except RequestError as exc:
            if exc.param == "model" and pipeline is not None:
                state = readiness.not_ready(pipeline, cause=exc.message)
                if state.warming_up:  # not a bad request: ask again when it is ready
                    raise NoCapacityError(state) from exc
            field = FIELD_OF_PARAM.get(exc.param, exc.param) or "non_field_errors"
            raise serializers.ValidationError({field: [exc.message]}, code=exc.code) from exc


class GenerationSerializer(serializers.ModelSerializer):
    pipeline: serializers.SlugRelatedField[Pipeline] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    # null until routed (drafter, verifier) or after the user is deleted
    user: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    drafter: serializers.SlugRelatedField[Node] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    verifier: serializers.SlugRelatedField[Node] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    prompt_token_count = serializers.SerializerMethodField()
    output_token_count = serializers.SerializerMethodField()
    timings = serializers.SerializerMethodField()
    links = serializers.SerializerMethodField()
    prompt = serializers.CharField(read_only=True, allow_null=True)
    output_text = serializers.CharField(read_only=True, allow_null=True)
    content_visible = serializers.SerializerMethodField(
        help_text="False: you may see this generation's figures but not its text (prompt, "
        "output_text and params.stop are null)."
    )

    class Meta:
        model = Generation
        fields = [
            "id",
            "pipeline",
            "user",
            "state",
            "prompt",
            "params",
            "prompt_token_count",
            "output_text",
            "output_token_count",
            "finish_reason",
            "error",
            "drafter",
            "verifier",
            "attempts",
            "created_at",
            "started_at",
            "first_token_at",
            "finished_at",
            "timings",
            "counters",
            "links",
            "content_visible",
        ]
        read_only_fields = fields

    def get_prompt_token_count(self, obj) -> int:
        return len(obj.prompt_tokens or [])

    def get_output_token_count(self, obj) -> int:
        return len(obj.output_tokens or [])

    def get_timings(self, obj) -> dict:
        itl = obj.itl_ms or {}
        total = None
        if obj.finished_at is not None:
            total = (obj.finished_at - obj.created_at).total_seconds() * 1000
        return {
            "queue_ms": obj.queue_ms,
            "ttft_ms": obj.ttft_ms,
            "itl_p50_ms": itl.get("p50"),
            "itl_p99_ms": itl.get("p99"),
            "itl_mean_ms": itl.get("mean"),
            "total_ms": total,
        }

    def get_links(self, obj) -> dict:
        request = self.context.get("request")
        url = reverse("api-generation-detail", args=[obj.id], request=request)
        return {
            "self": url,
            "stream": reverse("api-generation-stream", args=[obj.id], request=request),
            "cancel": url,
            "timeline": reverse("api-generation-timeline", args=[obj.id], request=request),
        }

    def get_content_visible(self, obj) -> bool:
        request = self.context.get("request")
        return request is not None and can(request.user, "read_content", obj)

    def to_representation(self, obj):
        data = super().to_representation(obj)
        live = self.context.get("live")
        if live is not None:  # a running generation: its output so far, from its stream
            data["output_text"] = live["text"]
            data["output_token_count"] = live["n"]
        if not data["content_visible"]:
            data["prompt"] = data["output_text"] = None
            if isinstance(data.get("params"), dict) and "stop" in data["params"]:
                data["params"] = {**data["params"], "stop": None}
        return data


def submitted_body(generation: Generation, request) -> dict:
    """`GenerationSerializer(generation).data` for a row just submitted by `request.user`
    (queued: nothing started, nothing out yet), built directly: on the path of every request,
    DRF's model serializer spent more CPU building its fields than the rest of the answer.
    tests/serving/test_generations_api.py holds the two equal."""
    g = generation
    visible = can(request.user, "read_content", g)
    params = g.params
    if not visible and isinstance(params, dict) and "stop" in params:
        params = {**params, "stop": None}
    url = reverse("api-generation-detail", args=[g.id], request=request)
    return {
        "id": str(g.id),
        "pipeline": g.pipeline.name,
        "user": g.user.username if g.user is not None else None,
        "state": g.state,
        "prompt": g.prompt if visible else None,
        "params": params,
        "prompt_token_count": len(g.prompt_tokens or []),
        "output_text": g.output_text if visible else None,
        "output_token_count": len(g.output_tokens or []),
        "finish_reason": g.finish_reason,
        "error": g.error,
        "drafter": g.drafter.name if g.drafter is not None else None,
        "verifier": g.verifier.name if g.verifier is not None else None,
        "attempts": g.attempts,
        "created_at": _iso(g.created_at),
        "started_at": _iso(g.started_at),
        "first_token_at": _iso(g.first_token_at),
        "finished_at": _iso(g.finished_at),
        "timings": {
            "queue_ms": g.queue_ms,
            "ttft_ms": g.ttft_ms,
            "itl_p50_ms": None,
            "itl_p99_ms": None,
            "itl_mean_ms": None,
            "total_ms": None,
        },
        "counters": g.counters,
        "links": {
            "self": url,
            "stream": reverse("api-generation-stream", args=[g.id], request=request),
            "cancel": url,
            "timeline": reverse("api-generation-timeline", args=[g.id], request=request),
        },
        "content_visible": visible,
    }


_DATETIME = serializers.DateTimeField()


def _iso(value) -> str | None:
    return None if value is None else _DATETIME.to_representation(value)


class GenerationFilter(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=GenerationState.choices)
    pipeline = django_filters.CharFilter(field_name="pipeline__name")

    class Meta:
        model = Generation
        fields = ["state", "pipeline"]


def generations():
    return Generation.objects.select_related("pipeline", "user", "drafter", "verifier")


def live_output(generation: Generation) -> dict | None:
    """Text and token count so far from the generation's stream while it is not ended."""
    if generation.is_terminal:
        return None
    events = wire.read_all(generation.id, node=generation.verifier_id)
    n = 0
    for _id, event in events:
        if event.get("type") == "tokens":
            n = event.get("n", n + len(event.get("tokens", [])))
    return {"text": wire.collect_text(events), "n": n}


class RenderedOnLane:
    """Under ASGI, the response leaves the view rendered, as a plain HttpResponse: Django's
    async handler renders a template response (DRF's Response is one) in a thread hop of
    its own, one more visit to the sync lane per request (fleet/runtime/web_handler.py)."""

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)  # type: ignore[misc]
        if not isinstance(request._request, ASGIRequest) or not hasattr(response, "render"):
            return response
        response.render()
        plain = HttpResponse(response.content, status=response.status_code)
        for header, value in response.items():
            plain[header] = value
        plain.cookies = response.cookies
        return plain


class GenerationListCreate(RenderedOnLane, generics.ListCreateAPIView):
    """List generations (newest first; `?state=`, `?pipeline=`) or start one."""

    serializer_class = GenerationSerializer
    filterset_class = GenerationFilter
    ordering_fields = ["created_at", "finished_at"]
    method_actions = {"POST": "generate"}

    def get_queryset(self):
        return generations()

    @extend_schema(
        request=GenerationCreateSerializer,
        responses={
            201: GenerationSerializer,
            503: OpenApiResponse(
                description="Warming up, or no drafter/verifier pair can take it now "
                "(Retry-After says when to ask again)."
            ),
        },
    )
    def post(self, request, *args, **kwargs):
        incoming = GenerationCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        prepared = incoming.validated_data
        try:
            generation = services.generation_submit(
                pipeline=prepared.pipeline,
                prompt=prepared.prompt,
                prompt_tokens=prepared.prompt_tokens,
                params=prepared.params,
                user=request.user,
            )
        except services.NoCapacity as exc:
            cause = str(exc) or "no healthy drafter/verifier pair"
            raise NoCapacityError(readiness.not_ready(prepared.pipeline, cause=cause)) from exc
        # The row as written: its pipeline, user and pair are already on it (no re-read).
        body = submitted_body(generation, request)
        return Response(
            body, status=status.HTTP_201_CREATED, headers={"Location": body["links"]["self"]}
        )


class GenerationDetail(RenderedOnLane, generics.RetrieveDestroyAPIView):
    """One generation, with its output so far while it runs; DELETE cancels it."""

    serializer_class = GenerationSerializer
    lookup_url_kwarg = "generation_id"
    # The object check below narrows DELETE to operators or the generation's owner.
    method_actions = {"DELETE": "generate"}

    def get_queryset(self):
        return generations()

    def retrieve(self, request, *args, **kwargs):
        generation = self.get_object()
        context = {"request": request, "live": live_output(generation)}
        return Response(GenerationSerializer(generation, context=context).data)

    @extend_schema(
        responses={
            200: OpenApiResponse(GenerationSerializer, "It had already ended: nothing changed."),
            202: OpenApiResponse(GenerationSerializer, "Cancellation requested."),
        }
    )
    def delete(self, request, *args, **kwargs):
        return super().delete(request, *args, **kwargs)

    def destroy(self, request, *args, **kwargs):
        generation = self.get_object()
        if not can(request.user, "cancel", generation):
            raise PermissionDenied("Only an admin or the generation's owner may cancel it.")
        if generation.is_terminal:
            body = GenerationSerializer(generation, context={"request": request}).data
            return Response(body, status=status.HTTP_200_OK)
        services.generation_cancel(generation=generation, actor=request.user)
        generation = generations().get(pk=generation.pk)
        body = GenerationSerializer(generation, context={"request": request}).data
        return Response(body, status=status.HTTP_202_ACCEPTED)
