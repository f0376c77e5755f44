"""Builders of the objects tests need: users, nodes, pipelines and placements.

One place for them, so every test builds a node or a pipeline the same way (through the
services where one exists). The personas (alice the viewer, bob the operator, ...) are
fixtures in tests/conftest.py built with `user`; telemetry's sample builders live with the
telemetry tests (tests/telemetry/factories.py).
"""

from __future__ import annotations

import importlib
import itertools

from django.contrib.auth import get_user_model
from django.utils import timezone

from fleet.accounts.services import user_set_role
from fleet.nodes.models import HardwareProfile, Node
from fleet.nodes.services import node_register
from fleet.pipelines.models import Pipeline, PipelineRevision, Placement
from fleet.pipelines.services import snapshot

PASSWORD = "correct-horse-battery-staple-42"

_names = itertools.count(1)


def user(username: str, role: str | None = None):
    """A user with `PASSWORD` and `role` (viewer, operator, admin; None: no role)."""
    made = get_user_model().objects.create_user(username=username, password=PASSWORD)
    if role:
        user_set_role(user=made, role=role)
    return made


def catalogue_profile(slug: str) -> HardwareProfile:
    """A profile of the seeded catalogue. The catalogue is seeded by a migration, which a
    transactional test's flush empties: put the row back from the migration's own data."""
    found = HardwareProfile.objects.filter(slug=slug).first()
    if found is not None:
        return found
    seed = importlib.import_module("fleet.nodes.migrations.0002_seed_hardware_profiles")
    row = next(dict(p) for p in seed.PROFILES if p["slug"] == slug)
    return HardwareProfile.objects.create(**row)


def make_node(*, profile: str = "h100-sxm", roles=("verify",), **kwargs):
    """Registers a node through the service; returns (node, plain token)."""
    kwargs.setdefault("name", f"node-{next(_names)}")
    return node_register(profile=catalogue_profile(profile), roles=list(roles), **kwargs)


def online_node(*, profile: str = "h100-sxm", roles=("verify", "draft"), **kwargs) -> Node:
    """A registered node that has just been seen (state online)."""
    node, _ = make_node(
        profile=profile, roles=roles, name=kwargs.pop("name", f"pl-node-{next(_names)}"), **kwargs
    )
    Node.objects.filter(pk=node.pk).update(state="online", last_seen=timezone.now())
    node.refresh_from_db()
    return node


def make_pipeline(*, name: str | None = None, **fields) -> Pipeline:
    """A pipeline with its first revision (as the create service leaves it)."""
    fields.setdefault("target_model", "llama-3.1-8b")
    fields.setdefault("draft_model", "llama-3.2-1b")
    pipeline = Pipeline.objects.create(name=name or f"pipe-{next(_names)}", **fields)
    PipelineRevision.objects.create(pipeline=pipeline, version=1, config=snapshot(pipeline))
    return pipeline


def place(pipeline: Pipeline, node: Node, role: str) -> Placement:
    return Placement.objects.create(pipeline=pipeline, node=node, role=role)
