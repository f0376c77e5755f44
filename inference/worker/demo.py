"""The demo pipeline for `manage.py up`: the demo pair (trained once if missing), two nodes
on this machine (demo-draft, demo-verify) and the pipeline "demo" joining them.

Idempotent and safe when the drafter's and the verifier's processes run it at once: a file
lock serialises them (the first trains the pair; the second finds it). Each call issues the
node a fresh token (the old one is revoked): one process per node on this machine.
"""

from __future__ import annotations

import fcntl
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.db import transaction

DEMO_PIPELINE = "demo"
NODE_NAMES = {"draft": "demo-draft", "verify": "demo-verify"}


def _profile():
    from fleet.nodes.models import HardwareProfile

    profile = HardwareProfile.objects.filter(slug="generic-cpu").first()
    if profile is None:
        profile, _ = HardwareProfile.objects.get_or_create(
            slug="local-cpu",
            defaults=dict(kind="cpu", vendor="Local", model="CPU", memory_gb=16,
                          memory_bandwidth_gbs=50, peak_bf16_tflops=1, tdp_w=65, idle_w=10),
        )  # fmt: skip
    return profile


def _ensure_rows(role: str) -> tuple[int, str]:
    from fleet.nodes.models import Node
    from fleet.nodes.services import node_register, node_token_rotate
    from fleet.pipelines.models import Pipeline, Placement

    with transaction.atomic():
        pipeline, _ = Pipeline.objects.get_or_create(
            name=DEMO_PIPELINE,
            defaults=dict(target_model="demo-target", draft_model="demo-draft",
                          drafter_kind="model", description="The demo pair on this machine"),
        )  # fmt: skip
        node = Node.objects.filter(name=NODE_NAMES[role]).first()
        if node is None:
            node, token = node_register(name=NODE_NAMES[role], profile=_profile(), roles=[role])
        else:
            _, token = node_token_rotate(node=node)
        if not Placement.objects.filter(node=node).exists():
            Placement.objects.create(pipeline=pipeline, node=node, role=role)
    return node.pk, token


def ensure_demo(*, role: str, log=print) -> tuple[int, str]:
    models = Path(settings.DATA_DIR) / "models"
    models.mkdir(parents=True, exist_ok=True)
    with open(Path(settings.DATA_DIR) / "demo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        from inference.training.demo_pair import pair_exists

        if not pair_exists(models):
            log("demo pair missing: training it once (a few minutes on a CPU)...")
            call_command("train_demo_pair")
        return _ensure_rows(role)
