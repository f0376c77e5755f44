"""Read queries of pipelines: lists with their placements, revisions, the audit log."""

from __future__ import annotations

from django.db.models import Count, Prefetch, Q, QuerySet

from fleet.audit.models import AuditEvent
from fleet.nodes.choices import NodeState
from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline, PipelineRevision, Placement


def pipeline_queryset() -> QuerySet[Pipeline]:
    placements = Placement.objects.select_related("node__profile").order_by("role", "node__name")
    return (
        Pipeline.objects.prefetch_related(Prefetch("placements", queryset=placements))
        .annotate(
            n_drafters=Count("placements", filter=Q(placements__role="draft"), distinct=True),
            n_verifiers=Count("placements", filter=Q(placements__role="verify"), distinct=True),
        )
        .order_by("name")
    )


def pipeline_counted() -> QuerySet[Pipeline]:
    """Pipelines with their drafter/verifier counts and no placements (the API attaches a
    bounded number: `fleet.pipelines.api_placements`)."""
    return Pipeline.objects.annotate(
        n_drafters=Count("placements", filter=Q(placements__role="draft"), distinct=True),
        n_verifiers=Count("placements", filter=Q(placements__role="verify"), distinct=True),
    ).order_by("name")


def pipeline_list(*, simulated: bool | None = None) -> QuerySet[Pipeline]:
    qs = pipeline_queryset()
    if simulated is not None:
        qs = qs.filter(simulated=simulated)
    return qs


def pipeline_get(*, pk: int) -> Pipeline:
    return pipeline_queryset().get(pk=pk)


def revisions(*, pipeline: Pipeline) -> QuerySet[PipelineRevision]:
    return PipelineRevision.objects.filter(pipeline=pipeline).order_by("-version")


def audit_events(*, pipeline: Pipeline | None = None) -> QuerySet[AuditEvent]:
    qs = AuditEvent.objects.select_related("actor", "pipeline", "node")
    if pipeline is not None:
        qs = qs.filter(pipeline=pipeline)
    return qs


def free_nodes() -> QuerySet[Node]:
    """Nodes that serve no pipeline and are not retired."""
    return (
        Node.objects.select_related("profile")
        .exclude(state=NodeState.RETIRED)
        .filter(placement__isnull=True)
        .order_by("name")
    )


def placements(*, pipeline: Pipeline) -> QuerySet[Placement]:
    return Placement.objects.filter(pipeline=pipeline).select_related("node__profile")
