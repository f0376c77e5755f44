"""Boot of one node worker process: find the node and its placement, load the engine once,
start the engine loop and the agent, then consume `node.<id>` with a solo Celery pool."""

from __future__ import annotations

import logging
import os

from django.core.exceptions import ImproperlyConfigured

from fleet.nodes.models import Node
from fleet.pipelines.models import Placement
from inference.worker import engine_loop
from inference.worker.messaging import node_queue

logger = logging.getLogger(__name__)


def resolve_node(ref: str) -> Node:
    node = (
        Node.objects.select_related("profile")
        .filter(**({"pk": int(ref)} if ref.isdigit() else {"name": ref}))
        .first()
    )
    if node is None:
        raise ImproperlyConfigured(f"TANDEM_NODE_ID: no node {ref!r}")
    return node


def build_loop(node: Node, role: str):
    placement = Placement.objects.select_related("pipeline").filter(node=node).first()
    if placement is None:
        raise ImproperlyConfigured(f"node {node.name!r} is not placed in any pipeline")
    if placement.role != role:
        raise ImproperlyConfigured(f"node {node.name!r} is placed as {placement.role}, not {role}")
    pipeline = placement.pipeline
    from inference.worker import engine_cache

    common = {"node_id": node.pk, "pipeline_id": pipeline.pk, "config": pipeline.config()}
    if role == "verify":
        from inference.worker.verify import VerifyLoop

        return VerifyLoop(engine=engine_cache.load_verify_engine(pipeline.target_model), **common)
    from inference.worker.draft import DraftLoop

    kind = pipeline.drafter_kind if pipeline.drafter_kind != "none" else "ngram"
    return DraftLoop(engine=engine_cache.load_draft_engine(kind, pipeline.draft_model), **common)


def run(*, node_ref: str, role: str, token: str, api_url: str, loglevel: str = "WARNING") -> None:
    from fleet.celery import app
    from inference.worker.agent import Agent

    node = resolve_node(node_ref)
    loop = build_loop(node, role)
    engine_loop.install(loop)
    loop.start()
    agent = Agent(node=node, loop=loop, token=token, api_url=api_url)
    agent.start()
    logger.info("node %s (%s) serving on %s", node.name, role, node_queue(node.pk))
    app.worker_main(
        [
            "worker",
            f"--queues={node_queue(node.pk)}",
            "--pool=solo",
            "--concurrency=1",
            f"--hostname={role}-{node.pk}-{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            f"--loglevel={loglevel}",
        ]
    )
    loop.stop()
