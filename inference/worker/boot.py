"""Boot of one node worker process: ask the control plane who this node is (its token
authenticates it; no database), switch to the node's own Redis user (`use_node_redis`),
load the engine once, start the engine loop and the agent, then consume `node.<id>` with a
solo Celery pool."""

from __future__ import annotations

import logging
import os

from django.core.exceptions import ImproperlyConfigured

from inference.wire import node_prefix, node_queue
from inference.worker import engine_loop
from inference.worker.control_api import check_node, fetch_session

logger = logging.getLogger(__name__)


def use_node_redis(session: dict) -> str:
    """From here on this process reaches Redis as its node's own ACL user
    (`fleet.nodes.redis_acl`), at the address of its REDIS_URL, whatever password that URL
    carried: its engine loop, agent and Celery consumer. Kombu's unacked bookkeeping moves
    under the node's own keys, and remote control (pub/sub) is off. Returns the URL."""
    from django.conf import settings

    from fleet.celery import app
    from fleet.nodes.redis_acl import node_url

    creds = session.get("redis")
    if not creds:
        raise ImproperlyConfigured("the control plane gave this node no Redis user")
    if not settings.REDIS_URL:
        raise ImproperlyConfigured("REDIS_URL is required: the address of the fleet's Redis")
    url = node_url(settings.REDIS_URL, session["node"], creds["password"])
    settings.REDIS_URL = url
    prefix = node_prefix(session["node"])
    app.conf.update(
        broker_url=url,
        result_backend=None,
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        broker_transport_options={
            "unacked_key": f"{prefix}unacked",
            "unacked_index_key": f"{prefix}unacked_index",
            "unacked_mutex_key": f"{prefix}unacked_mutex",
        },
    )
    return url


def build_loop(session: dict, role: str):
    placement = session.get("placement")
    name = session["name"]
    if placement is None:
        raise ImproperlyConfigured(f"node {name!r} is not placed in any pipeline")
    if placement["role"] != role:
        raise ImproperlyConfigured(f"node {name!r} is placed as {placement['role']}, not {role}")
    config = placement["config"]
    from inference.worker import engine_cache

    common = {
        "node_id": session["node"],
        "pipeline_id": placement["pipeline"],
        "config": config,
        "key": session["signing_key"],
        "control_key": session.get("control_key", ""),
        "peers": placement.get("peers") or (),
    }
    if role == "verify":
        from inference.worker.verify import VerifyLoop

        return VerifyLoop(engine=engine_cache.load_verify_engine(config["target_model"]), **common)
    from inference.worker.draft import DraftLoop

    kind = config["drafter_kind"] if config["drafter_kind"] != "none" else "ngram"
    engine = engine_cache.load_draft_engine(kind, config["draft_model"])
    return DraftLoop(engine=engine, **common)


def run(*, node_ref: str, role: str, token: str, api_url: str, loglevel: str = "WARNING") -> None:
    from fleet.celery import app
    from inference.worker import tasks  # noqa: F401  (registers the node's task)
    from inference.worker.agent import Agent

    session = fetch_session(api_url, token)
    check_node(session, node_ref)
    use_node_redis(session)
    node_id = session["node"]
    loop = build_loop(session, role)
    engine_loop.install(loop)
    loop.start()
    agent = Agent(
        node_id=node_id,
        profile=session["profile"],
        loop=loop,
        token=token,
        api_url=api_url,
        key=session["signing_key"],
    )
    agent.start()
    logger.info("node %s (%s) serving on %s", session["name"], role, node_queue(node_id))
    app.worker_main(
        [
            "worker",
            f"--queues={node_queue(node_id)}",
            "--pool=solo",
            "--concurrency=1",
            f"--hostname={role}-{node_id}-{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            f"--loglevel={loglevel}",
        ]
    )
    loop.stop()
