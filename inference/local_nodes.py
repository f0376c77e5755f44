"""The rows and tokens of this machine's local pipelines (`inference.local_pipelines`), written
by the control plane -- `manage.py local_nodes`, which `up` runs after its migrations and
compose's migrate service runs once -- because node workers hold no database credentials.

For each pipeline: its row, a drafter and a verifier node placed in it, and a fresh token
for each node (the old ones are revoked) written to DATA_DIR/nodes/<node>.json (private to
this user), where `run_node --local` reads it. The pipeline shows in the console and the
API at once, while its workers load or prepare the models.
"""

from __future__ import annotations

import json

from django.db import transaction

from fleet.datadir import private_dir, write_private
from fleet.nodes.models import HardwareProfile, Node
from fleet.nodes.services import node_register, node_token_rotate
from fleet.pipelines.models import Pipeline, Placement
from fleet.pipelines.node_actions import node_place
from fleet.pipelines.services import pipeline_create
from inference.local_pipelines import PIPELINES, credentials_path, node_name

ROLES = ("verify", "draft")


def _profile() -> HardwareProfile:
    profile = HardwareProfile.objects.filter(slug="generic-cpu").first()
    if profile is None:
        profile, _ = HardwareProfile.objects.get_or_create(
            slug="local-cpu",
            defaults=dict(
                kind="cpu",
                vendor="Local",
                model="CPU",
                memory_gb=16,
                memory_bandwidth_gbs=50,
                peak_bf16_tflops=1,
                tdp_w=65,
                idle_w=10,
            ),
        )
    return profile


@transaction.atomic
def local_node_ensure(*, pipeline: str, role: str) -> tuple[int, str]:
    """The node of `role` in local pipeline `pipeline` (rows created if missing) and a fresh
    token for it: (node id, plain token)."""
    spec = PIPELINES[pipeline]
    row = Pipeline.objects.filter(name=spec.name).first()
    if row is None:  # made as the API makes one: revision 1 and a "create" audit event
        row = pipeline_create(
            actor="local",
            reason="this machine's local pipeline (manage.py local_nodes)",
            # written in code, not a caller's input: the models directory may hold them as
            # links (or not yet: the workers prepare them while the pipeline shows)
            check_model_refs=False,
            name=spec.name,
            target_model=spec.target_model,
            draft_model=spec.draft_model,
            drafter_kind=spec.drafter_kind,
            description=spec.description,
            k_policy=spec.k_policy,
        )
    name = node_name(spec.name, role)
    node = Node.objects.filter(name=name).first()
    if node is None:
        node, token = node_register(name=name, profile=_profile(), roles=[role])
    else:
        _, token = node_token_rotate(node=node, actor="local")
    if not Placement.objects.filter(node=node).exists():  # through the audited door
        node_place(
            pipeline_id=row.pk,
            node_id=node.pk,
            role=role,
            actor="local",
            reason="this machine's local pipeline (manage.py local_nodes)",
            force=True,  # a new node has not sent its first heartbeat yet
        )
    return node.pk, token


def local_nodes_write(*, pipelines: list[str]) -> list[str]:
    """Rows and fresh credentials files for every node of `pipelines`; the node names."""
    names = []
    for pipeline in pipelines:
        for role in ROLES:
            node_id, token = local_node_ensure(pipeline=pipeline, role=role)
            name = node_name(pipeline, role)
            path = credentials_path(name)
            private_dir(path.parent)
            write_private(path, json.dumps({"node": node_id, "token": token}))
            names.append(name)
    return names
