"""Pipelines made outside the API (this machine's local pipelines, the simulator's) are made
through the same service as the API's: revision 1 and a "create" audit event from the start,
so their first configuration can be restored and the audit log begins with it (issue 14)."""

from __future__ import annotations

import pytest

from fleet.audit.models import AuditEvent
from fleet.pipelines.models import Pipeline, PipelineRevision
from fleet.planner import simulator

pytestmark = pytest.mark.django_db


def _made_like_the_api(pipeline: Pipeline) -> None:
    revision = PipelineRevision.objects.get(pipeline=pipeline, version=1)
    assert revision.config["k_policy"] == pipeline.k_policy
    assert revision.config["target_model"] == pipeline.target_model
    created = AuditEvent.objects.get(pipeline=pipeline, action="create")
    assert created.after["target_model"] == pipeline.target_model


def test_a_local_pipeline_starts_with_revision_1(tmp_path, settings):
    from inference.local_nodes import local_node_ensure

    settings.DATA_DIR = tmp_path
    local_node_ensure(pipeline="demo", role="draft")
    local_node_ensure(pipeline="demo", role="verify")  # the same pipeline: made once
    pipeline = Pipeline.objects.get(name="demo")
    _made_like_the_api(pipeline)
    assert AuditEvent.objects.filter(pipeline=pipeline, action="create").count() == 1
    assert pipeline.placements.count() == 2
    placed = AuditEvent.objects.filter(pipeline=pipeline, action="place")
    assert sorted(placed.values_list("node__name", flat=True)) == ["demo-draft", "demo-verify"]
    # the default pipelines ship in adaptive mode (fixed k = 4 lost to plain decoding)
    assert pipeline.k_policy == {"mode": "adaptive", "k_min": 0, "k_max": 8, "k": 4}


def test_simulated_pipelines_start_with_revision_1():
    simulator.setup_fleet(nodes=4, pipelines=2)
    pipelines = Pipeline.objects.filter(simulated=True)
    assert pipelines.count() == 2
    for pipeline in pipelines:
        _made_like_the_api(pipeline)
        assert pipeline.placements.count() == 2
    simulator.setup_fleet(nodes=4, pipelines=2)  # reused, not made again
    assert AuditEvent.objects.filter(action="create").count() == 2
