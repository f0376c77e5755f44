"""Small builders for telemetry tests: a profile, nodes with tokens, a pipeline, samples."""

from __future__ import annotations

import itertools
import time

from fleet.accounts.secrets import new_secret
from fleet.nodes.models import HardwareProfile, Node, NodeToken
from fleet.pipelines.models import Pipeline, Placement
from fleet.telemetry.ingest import token_key
from fleet.telemetry.samples import N_BUCKETS

_seq = itertools.count(1)


def profile(slug: str = "test-gpu") -> HardwareProfile:
    obj, _ = HardwareProfile.objects.get_or_create(
        slug=slug,
        defaults=dict(
            kind="gpu",
            vendor="Test",
            model="GPU",
            memory_gb=80,
            memory_bandwidth_gbs=3000,
            peak_bf16_tflops=900,
            tdp_w=700,
            idle_w=80,
        ),
    )
    return obj


def node(*, name: str | None = None, state: str = "online", simulated: bool = False):
    """(node, plain token)."""
    n = Node.objects.create(
        name=name or f"node-{next(_seq)}",
        profile=profile(),
        roles=["draft", "verify"],
        state=state,
        simulated=simulated,
    )
    plain, prefix, digest = new_secret("tdn")
    NodeToken.objects.create(node=n, prefix=prefix, token_hash=digest)
    return n, plain


def pipeline(name: str = "llama-pair") -> Pipeline:
    return Pipeline.objects.create(name=name, target_model="target", draft_model="draft")


def place(n: Node, p: Pipeline, role: str) -> Placement:
    return Placement.objects.create(node=n, pipeline=p, role=role)


def verify_sample(ts: float | None = None, **over) -> dict:
    """One second of a verifier: 10 drafts of k=4, 24 accepted, batch 8, 3 W... etc."""
    sample = {
        "ts": ts if ts is not None else time.time(),
        "interval_s": 1.0,
        "role": "verify",
        "num_drafts": 10,
        "num_draft_tokens": 40,
        "num_accepted_tokens": 24,
        "num_accepted_tokens_per_pos": [8, 7, 5, 4],
        "generation_tokens": 34,
        "verify_batch_hist": {"8": 5},
        "verify_step_s": 0.02,
        "num_requests_running": 8,
        "num_requests_waiting": 2,
        "itl_s": [0.01, 0.02, 0.03, 0.05],
        "power_w": 300.0,
        "power_source": "measured-nvml",
        "utilization": 0.5,
    }
    sample.update(over)
    return sample


def draft_sample(ts: float | None = None, **over) -> dict:
    sample = {
        "ts": ts if ts is not None else time.time(),
        "interval_s": 1.0,
        "role": "draft",
        "draft_steps": 40,
        "draft_step_s": 0.004,
        "power_w": 100.0,
        "power_source": "modeled",
        "utilization": 0.8,
    }
    sample.update(over)
    return sample


def key_of(node_id: int, plain: str) -> str:
    """The signing key of node `node_id` holding the plain token `plain`."""
    return token_key(node_id, plain)


EMPTY_HIST = [0] * N_BUCKETS
