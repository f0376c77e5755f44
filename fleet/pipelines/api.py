"""REST: /api/v1/pipelines (CRUD for the configuration) and one small view per action.

Reads need "view"; writes "operate" (RolePermission). Writes take the version the client
read (`version` in the body, or an If-Match header) and answer 409 when it is stale.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.audit.models import AuditEvent
from fleet.nodes import selectors as node_selectors
from fleet.nodes.api import IF_MATCH, RegistryErrorsMixin, node_response
from fleet.nodes.api import expected_version as node_expected_version
from fleet.nodes.models import Node
from fleet.nodes.serializers import NodeSerializer
from fleet.pipelines import api_placements, outbox, selectors, services
from fleet.pipelines.api_serializers import (
    AuditEventSerializer,
    NodeActionResultSerializer,
    PipelineSerializer,
    RevisionSerializer,
)
from fleet.pipelines.models import Pipeline, PipelineRevision, Placement
from fleet.pipelines.serializers import (
    ActionInput,
    BatchCapsInput,
    KPolicyInput,
    MoveInput,
    NodeStateInput,
    PipelineWriteSerializer,
    PlaceInput,
    RollbackInput,
    SwapDraftInput,
)


def expected_version(request, data: dict) -> int | None:
    """The version the client read: body `version`, else an If-Match header ("3" or W/"3")."""
    if data.get("version") is not None:
        return int(data["version"])
    header = request.headers.get("If-Match", "").strip()
    if header and header != "*":
        value = header.removeprefix("W/").strip('"')
        if not value.isdigit():
            raise serializers.ValidationError({"If-Match": "must be the pipeline version"})
        return int(value)
    return None


def _detail(pipeline: Pipeline, code=status.HTTP_200_OK) -> Response:
    pipeline = selectors.pipeline_counted().get(pk=pipeline.pk)
    response = Response(PipelineSerializer(pipeline).data, status=code)
    response["ETag"] = f'"{pipeline.version}"'
    return outbox.answer(response, pipeline.pk)  # 202 while its push to the nodes is pending


class PipelineList(generics.ListCreateAPIView):
    serializer_class = PipelineSerializer
    filterset_fields = ["simulated", "auto_mode"]
    ordering_fields = ["name", "created_at"]

    def get_queryset(self):
        return selectors.pipeline_counted()

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        assert page is not None  # the API always paginates
        api_placements.attach_placements(page)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def create(self, request, *args, **kwargs):
        write = PipelineWriteSerializer(data=request.data)
        write.is_valid(raise_exception=True)
        data = dict(write.validated_data)
        data.pop("version", None)
        reason = data.pop("reason", "")
        missing = [f for f in ("name", "target_model") if f not in data]
        if missing:
            raise serializers.ValidationError({f: ["This field is required."] for f in missing})
        pipeline = services.pipeline_create(actor=request.user, reason=reason, **data)
        return _detail(pipeline, status.HTTP_201_CREATED)


class PipelineDetail(generics.RetrieveUpdateAPIView):
    serializer_class = PipelineSerializer
    http_method_names = ["get", "patch", "head", "options"]

    def get_queryset(self):
        return selectors.pipeline_counted()

    def retrieve(self, request, *args, **kwargs):
        return _detail(self.get_object())

    def partial_update(self, request, *args, **kwargs):
        pipeline = Configure.run(request=request, pipeline=self.get_object(), data=request.data)
        return _detail(pipeline)


class RevisionList(generics.ListAPIView):
    serializer_class = RevisionSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation
            return PipelineRevision.objects.none()
        pipeline = get_object_or_404(Pipeline, pk=self.kwargs["pk"])
        return selectors.revisions(pipeline=pipeline)


class AuditList(generics.ListAPIView):
    serializer_class = AuditEventSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation
            return AuditEvent.objects.none()
        pipeline = get_object_or_404(Pipeline, pk=self.kwargs["pk"])
        return selectors.audit_events(pipeline=pipeline)


# --- actions ---------------------------------------------------------------------------------


class _Action(APIView):
    """POST only; parses `input_class`, calls `act`, answers the pipeline's new state."""

    input_class: type[serializers.Serializer] = ActionInput
    response_class: type[serializers.Serializer] = PipelineSerializer
    http_method_names = ["post", "options"]

    def post(self, request, pk: int, node_id: int | None = None):
        pipeline = get_object_or_404(Pipeline, pk=pk)
        result = self.run(request=request, pipeline=pipeline, node_id=node_id, data=request.data)
        return self.respond(pipeline, result, node_id)

    def respond(self, pipeline: Pipeline, result, node_id: int | None) -> Response:
        return _detail(result if isinstance(result, Pipeline) else pipeline)

    @classmethod
    def run(cls, *, request, pipeline: Pipeline, data, node_id: int | None = None):
        """Validate `data` with `input_class`, then act: the one path of this action, for
        the API and the pages alike. 404 when `node_id` is not in the pipeline; 400 (DRF
        ValidationError) for bad input; the services' 409s pass through."""
        if node_id is not None:
            get_object_or_404(Placement, pipeline=pipeline, node_id=node_id)
        parsed = cls.input_class(data=data)
        parsed.is_valid(raise_exception=True)
        args = dict(parsed.validated_data)
        args["expected_version"] = expected_version(request, args)
        args.pop("version", None)
        return cls().act(request=request, pipeline=pipeline, node_id=node_id, **args)


class Configure(_Action):
    """Change the configuration (PATCH of the pipeline; the pages' "configure")."""

    input_class = PipelineWriteSerializer

    def act(self, *, request, pipeline, node_id, expected_version, reason="", **changes):
        if "name" in changes or "simulated" in changes:
            raise serializers.ValidationError({"name": "name and simulated cannot change"})
        return services.pipeline_update(
            pipeline_id=pipeline.pk,
            actor=request.user,
            changes=changes,
            expected_version=expected_version,
            reason=reason,
        )


class _NodeAction(_Action):
    """An action on one node of the pipeline: answers `NodeActionResultSerializer` (a few
    hundred bytes), never the pipeline's every placement (thousands of rows at fleet scale).
    `act` returns the node's Placement (place, move), the Node (drain, return) or None."""

    response_class = NodeActionResultSerializer

    def respond(self, pipeline: Pipeline, result, node_id: int | None) -> Response:
        placement: Placement | None
        if isinstance(result, Placement):  # its node is the service's (locked, current)
            placement, node = result, result.node
            current_id = result.pipeline_id
        else:
            node = result if isinstance(result, Node) else Node.objects.get(pk=int(node_id or 0))
            placement = Placement.objects.select_related("node__profile").filter(node=node).first()
            current_id = pipeline.pk
        current = Pipeline.objects.only("id", "name", "version").get(pk=current_id)
        data = {
            "id": current.pk,
            "name": current.name,
            "version": current.version,
            "node": node,
            "placement": placement,
        }
        if current.pk != pipeline.pk:  # a move: the answer is the destination's
            data["from_pipeline"] = Pipeline.objects.only("id", "name", "version").get(
                pk=pipeline.pk
            )
        response = Response(NodeActionResultSerializer(data).data)
        response["ETag"] = f'"{current.version}"'
        return outbox.answer(response, current.pk, pipeline.pk)


class Place(_NodeAction):
    """Place a free node in this pipeline as drafter or verifier (or change its role)."""

    input_class = PlaceInput

    def act(self, *, request, pipeline, node_id, node, role, **kw):
        return services.node_place(
            pipeline_id=pipeline.pk, node_id=node, role=role, actor=request.user, **kw
        )


class Move(_NodeAction):
    """Move a node of this pipeline to another pipeline (same role unless given);
    `version` is the destination's, and so is the answer (`from_pipeline`: this one)."""

    input_class = MoveInput

    def act(self, *, request, pipeline, node_id, to_pipeline, role=None, **kw):
        get_object_or_404(Pipeline.objects.only("id"), pk=to_pipeline)
        return services.node_move(
            node_id=node_id, to_pipeline_id=to_pipeline, role=role, actor=request.user, **kw
        )


class Unplace(_NodeAction):
    """Take a node out of this pipeline (back to the free pool)."""

    def act(self, *, request, pipeline, node_id, **kw):
        services.node_unplace(node_id=node_id, actor=request.user, **kw)


class Drain(_NodeAction):
    """The node finishes the sequences it holds and takes no new ones."""

    def act(self, *, request, pipeline, node_id, **kw):
        return services.node_drain(node_id=node_id, actor=request.user, **kw)


class Return(_NodeAction):
    """A draining node takes new work again."""

    def act(self, *, request, pipeline, node_id, force=False, **kw):
        return services.node_return(node_id=node_id, actor=request.user, **kw)


class SetKPolicy(_Action):
    """Set the k policy: fixed, a table by batch size, or adaptive by measured goodput."""

    input_class = KPolicyInput

    def act(self, *, request, pipeline, node_id, k_policy, force=False, **kw):
        return services.pipeline_set_k_policy(
            pipeline_id=pipeline.pk, actor=request.user, k_policy=k_policy, **kw
        )


class SetBatchCaps(_Action):
    """Set the max verify batch and/or the max batch wait."""

    input_class = BatchCapsInput

    def act(self, *, request, pipeline, node_id, force=False, **kw):
        return services.pipeline_set_batch_caps(pipeline_id=pipeline.pk, actor=request.user, **kw)


class SwapDraft(_Action):
    """Swap the draft model (checked for tokenizer compatibility) or the drafter kind."""

    input_class = SwapDraftInput

    def act(self, *, request, pipeline, node_id, force=False, **kw):
        return services.pipeline_swap_draft(pipeline_id=pipeline.pk, actor=request.user, **kw)


class Rollback(_Action):
    """Restore the configuration of an earlier version (itself a new version)."""

    input_class = RollbackInput

    def act(self, *, request, pipeline, node_id, to_version, force=False, **kw):
        return services.pipeline_rollback(
            pipeline_id=pipeline.pk, actor=request.user, to_version=to_version, **kw
        )


def _document(view: type[_Action]) -> None:
    """OpenAPI: each action's input serializer, and its answer: the pipeline's new state, or
    for the node actions the compact `NodeActionResultSerializer`."""

    def post(self, request, pk: int, node_id: int | None = None):
        return _Action.post(self, request, pk, node_id)

    view.post = extend_schema(
        request=view.input_class, responses=view.response_class, description=view.__doc__ or ""
    )(post)


for _view in (Place, Move, Unplace, Drain, Return, SetKPolicy, SetBatchCaps, SwapDraft, Rollback):
    _document(_view)


# --- node state: /api/v1/nodes/<id>/drain|return -----------------------------------------------
# Served here, not by the node registry's API: draining changes what a pipeline may route to,
# so it goes through the same audited, checked and pushed services as the pipeline actions.


class _NodeStateAction(RegistryErrorsMixin, GenericAPIView):
    """POST, optional body `{"reason", "force"}`, optional If-Match (the node's ETag)."""

    queryset = node_selectors.node_queryset()
    serializer_class = NodeSerializer
    write_action = "operate"

    def act(self, **kw) -> Node:
        raise NotImplementedError

    @extend_schema(request=NodeStateInput, responses={200: NodeSerializer}, parameters=[IF_MATCH])
    def post(self, request, pk):
        node = self.get_object()
        data = NodeStateInput(data=request.data)
        data.is_valid(raise_exception=True)
        node = self.act(
            node_id=node.pk,
            actor=request.user,
            node_version=node_expected_version(request),
            **data.validated_data,
        )
        return node_response(node)


class NodeDrain(_NodeStateAction):
    """The node finishes what it holds and takes no new work (refused, 409, when it is the
    last healthy drafter or verifier of its pipeline, unless `force`)."""

    def act(self, **kw):
        return services.node_drain(**kw)


class NodeReturn(_NodeStateAction):
    """A draining node takes new work again."""

    def act(self, *, force=False, **kw):
        return services.node_return(**kw)
