"""What-if at fleet scale: the mix comes from one GROUP BY, so the queries do not grow with
the fleet, and the answer is the one the per-placement model gives."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.nodes.models import HardwareProfile, Node
from fleet.pipelines.models import Pipeline, Placement
from fleet.planner import measurements, whatif
from tests.factories import make_pipeline, online_node, place

pytestmark = pytest.mark.django_db

CHANGE = {"move_to_verify": 2, "add_drafters": 5, "add_drafter_profile": "groq-lpu"}


def grow(pipeline: Pipeline, n: int, *, slug: str, role: str, state: str = "online") -> None:
    profile = HardwareProfile.objects.get(slug=slug)
    prefix = f"{pipeline.pk}-{slug}-{role}-{state}"
    Node.objects.bulk_create(
        Node(
            name=f"{prefix}-{i}",
            profile=profile,
            roles=["draft", "verify"],
            state=state,
            last_seen=timezone.now(),
        )
        for i in range(n)
    )
    Placement.objects.bulk_create(
        Placement(pipeline=pipeline, node=node, role=role)
        for node in Node.objects.filter(name__startswith=f"{prefix}-")
    )


def queries_of_what_if() -> tuple[int, dict]:
    with CaptureQueriesContext(connection) as ctx:
        result = whatif.what_if(CHANGE)
    return len(ctx.captured_queries), result


def test_what_if_queries_do_not_grow_with_the_fleet(pipeline):
    other = make_pipeline(name="gpu-drafted")
    place(other, online_node(name="h-v1"), "verify")
    place(other, online_node(name="h-d1"), "draft")
    small, _ = queries_of_what_if()
    for p in (pipeline, other):
        grow(p, 60, slug="h100-sxm", role="verify")
        grow(p, 40, slug="groq-lpu", role="draft")
        grow(p, 30, slug="l40s", role="draft")
        grow(p, 10, slug="h200", role="verify", state="retired")
    large, result = queries_of_what_if()
    assert large == small
    row = next(r for r in result["before"]["pipelines"] if r["name"] == "gpu-drafted")
    assert (row["n_verifiers"], row["n_drafters"]) == (61, 71)  # retired nodes left out


def test_the_counts_model_is_the_placements_model(pipeline):
    grow(pipeline, 7, slug="h200", role="verify")
    grow(pipeline, 5, slug="groq-lpu", role="draft")
    grow(pipeline, 3, slug="h100-sxm", role="draft", state="retired")
    rows = list(pipeline.placements.select_related("node__profile"))
    counts, profiles = measurements.role_counts(rows)
    inputs = {"alpha": 0.7}
    by_rows = measurements.pipeline_model(pipeline, placements=rows, measured_inputs=inputs)
    by_counts = measurements.pipeline_model_of_counts(
        pipeline, counts=counts, profiles=profiles, measured_inputs=inputs
    )
    assert by_rows == by_counts
    assert (by_rows.n_verifiers, by_rows.n_drafters) == (8, 6)  # the fixture's 1+7, 1+5
    assert by_rows.verifier is not None and by_rows.verifier.slug == "h200"
