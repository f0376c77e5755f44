"""Fixtures of the pipeline tests: pipelines, online nodes placed in them."""

from __future__ import annotations

import itertools

import pytest
from django.utils import timezone

from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline, PipelineRevision, Placement
from fleet.pipelines.services import snapshot
from tests.nodes.conftest import make_node

_names = itertools.count(1)


def online_node(*, profile: str = "h100-sxm", roles=("verify", "draft"), **kwargs) -> Node:
    node, _ = make_node(
        profile=profile, roles=roles, name=kwargs.pop("name", f"pl-node-{next(_names)}"), **kwargs
    )
    Node.objects.filter(pk=node.pk).update(state="online", last_seen=timezone.now())
    node.refresh_from_db()
    return node


def make_pipeline(*, name: str | None = None, **fields) -> Pipeline:
    fields.setdefault("target_model", "llama-3.1-8b")
    fields.setdefault("draft_model", "llama-3.2-1b")
    pipeline = Pipeline.objects.create(name=name or f"pipe-{next(_names)}", **fields)
    PipelineRevision.objects.create(pipeline=pipeline, version=1, config=snapshot(pipeline))
    return pipeline


def place(pipeline: Pipeline, node: Node, role: str) -> Placement:
    return Placement.objects.create(pipeline=pipeline, node=node, role=role)


@pytest.fixture
def pipeline(db):
    """A pipeline with one online GPU verifier and one online SRAM drafter."""
    p = make_pipeline(name="main")
    place(p, online_node(name="gpu-v1"), "verify")
    place(p, online_node(name="sram-d1", profile="d-matrix-corsair", roles=("draft",)), "draft")
    return p
