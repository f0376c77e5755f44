"""Each node's own Redis user (Redis 6+ ACLs), set by the control plane with its admin
connection: a node worker reaches Redis as `node-<id>`, limited to the keys of
`redis_keys.node_key_patterns` (its own, the outboxes addressed to it, its Celery queue,
the two signed streams it appends to), no pub/sub channel, and only the commands a node runs.
The web tier and control processes keep the admin user (REDIS_URL).

The password is derived (`fleet.nodes.signing.redis_password`: SECRET_KEY, node id, token
digest), so it is stored nowhere and one per active token is set: revoking or rotating a token
drops its password (`sync_node`, after commit). A node learns it from its session
(`inference.serving.node_session`), which sets the user first, so a Redis restarted without
its ACLs gets them back when a node boots.

Commands: no stream read (XRANGE, XREAD, ...: the ledger and telemetry streams a node appends
to carry other nodes' outputs, and Redis 6 key patterns do not tell reads from writes), no
KEYS/SCAN, no pub/sub, nothing administrative.
"""

from __future__ import annotations

import logging
from urllib.parse import quote, urlsplit, urlunsplit

import redis

from fleet import redis_clients
from fleet.nodes.redis_keys import node_key_patterns
from fleet.nodes.signing import redis_password

logger = logging.getLogger(__name__)

# What a node worker runs: its lists and streams (inference.wire), Celery's kombu transport on
# its own queue (BRPOP, bindings, the unacked hash and index under its own prefix), reports.
NODE_COMMANDS = (
    "ping",
    "echo",
    "hello",
    "auth",
    "client|setname",
    "client|getname",
    "client|id",
    "select",
    "multi",
    "exec",
    "discard",
    "xadd",
    "expire",
    "pexpire",
    "rpush",
    "lpush",
    "blpop",
    "brpop",
    "lrange",
    "ltrim",
    "llen",
    "set",
    "get",
    "del",
    "evalsha",  # redis-py's lock (kombu's restore mutex): commands inside are checked too
    "eval",
    "script|load",
    "script|exists",
    "zrange",
    "smembers",
    "sadd",
    "hset",
    "hget",
    "hdel",
    "zadd",
    "zrem",
    "zrevrangebyscore",
)


def username(node_id: int) -> str:
    return f"node-{int(node_id)}"


def node_rules(node_id: int, passwords: list[str]) -> list[str]:
    """The ACL SETUSER rules of node `node_id`'s user (a full reset each time)."""
    rules = ["reset", "on" if passwords else "off", "resetkeys", "resetchannels", "-@all"]
    rules += [f"+{command}" for command in NODE_COMMANDS]
    rules += [f"~{pattern}" for pattern in node_key_patterns(node_id)]
    rules += [f">{p}" for p in passwords]
    return rules


def active_passwords(node_id: int) -> list[str]:
    from fleet.nodes.models import NodeToken

    digests = NodeToken.objects.filter(node_id=node_id, revoked_at__isnull=True).values_list(
        "token_hash", flat=True
    )
    return [redis_password(node_id, d) for d in digests]


def sync_node(node_id: int, *, client: redis.Redis | None = None) -> None:
    """Set node `node_id`'s Redis user from its active tokens (none: the user is off)."""
    client = client or redis_clients.client()
    client.execute_command(
        "ACL", "SETUSER", username(node_id), *node_rules(node_id, active_passwords(node_id))
    )


def sync_node_quietly(node_id: int) -> None:
    """`sync_node` after a token change: Redis away now is not the change's failure (the node's
    next session sets it again)."""
    try:
        sync_node(node_id)
    except redis.RedisError:
        logger.warning("node %s: its Redis user was not updated (Redis unavailable)", node_id)


def node_url(base_url: str, node_id: int, password: str) -> str:
    """`base_url` (the admin's REDIS_URL) with node `node_id`'s user and password."""
    parts = urlsplit(base_url)
    host = parts.hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{quote(username(node_id), safe='')}:{quote(password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


RUN_ID_KEY = "tandem:acl:run_id"  # the Redis process whose node users were last set


def resync_after_restart(*, client: redis.Redis | None = None) -> int:
    """Node users live in the Redis process's memory (ACL SETUSER is not in its append-only
    file): when Redis runs as a new process (restarted under `up`, or by compose), set every
    node's user again, so running node workers reconnect as themselves. Cheap when nothing
    restarted (one INFO and one GET). Returns the users set."""
    from fleet.nodes.models import NodeToken

    client = client or redis_clients.client()
    run_id = str(client.info("server").get("run_id", ""))
    stored = client.get(RUN_ID_KEY)
    if isinstance(stored, bytes):
        stored = stored.decode()
    if run_id and stored == run_id:
        return 0
    node_ids = set(
        NodeToken.objects.filter(revoked_at__isnull=True).values_list("node_id", flat=True)
    )
    for node_id in sorted(node_ids):
        sync_node(node_id, client=client)
    client.set(RUN_ID_KEY, run_id)
    if stored:
        logger.warning("Redis restarted: %d node users set again", len(node_ids))
    return len(node_ids)
