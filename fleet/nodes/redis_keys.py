"""The Redis keys a node may touch, named once, below both planes: the data plane's wire
(`inference.wire`) builds its keys from these, and this app's ACL (`redis_acl`) grants a
node's user exactly these patterns. No import of the data plane or of telemetry: the two
signed streams a node appends to are named here and imported by their readers
(`inference.node_reports`, `fleet.telemetry.ingest`).
"""

from __future__ import annotations

LEDGER_STREAM = "tandem:ledger"  # node reports (inference.node_reports)
TELEMETRY_STREAM = "tandem:telemetry"  # the prefix of the telemetry shard streams


def node_prefix(node_id: int) -> str:
    """Every key node `node_id` owns starts with this (see `inference.wire`'s module doc)."""
    return f"tandem:node:{int(node_id)}:"


def node_queue(node_id: int) -> str:
    """The node's Celery queue (signed control messages)."""
    return f"node.{node_id}"


def node_key_patterns(node_id: int) -> list[str]:
    """The Redis key patterns of node `node_id`'s ACL user (`fleet.nodes.redis_acl`): its own
    keys, the outboxes addressed to it, its Celery queue, and the two signed streams it
    appends to (without any command that reads a stream)."""
    queue = node_queue(node_id)
    return [
        f"{node_prefix(node_id)}*",
        f"tandem:node:*:to:{int(node_id)}",
        queue,
        f"{queue}\x06\x16*",  # kombu's priority lists of the queue
        f"_kombu.binding.{queue}",
        f"_kombu.binding_permanent.{queue}",
        LEDGER_STREAM,
        f"{TELEMETRY_STREAM}:*",
    ]
