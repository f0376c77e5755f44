"""The key a node signs its telemetry samples with (see fleet/telemetry/ingest.py).

HMAC-SHA256(SECRET_KEY, context | node id | SHA-256 digest of the node's token). The database
holds the digest but not SECRET_KEY, so reading it is not enough to sign for a node; the key
is bound to one node and one token (rotating either changes it) and is stored nowhere.
A per-node key "stored only hashed" was the alternative; it cannot work with an HMAC, whose
verifier needs the key itself, and public-key signatures would cost far more per sample.
"""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings

from fleet.accounts.secrets import digest

_CONTEXT = b"tandem/telemetry-signing-key/v2\0"
_CONTROL = b"tandem/node-control-key/v1\0"
_REDIS = b"tandem/node-redis-password/v1\0"


def signing_key(node_id: int, token_digest: str, *, secret: str | None = None) -> str:
    """The signing key of node `node_id` holding the token whose digest (what the nodes app
    stores) is `token_digest`."""
    secret_key = (secret if secret is not None else settings.SECRET_KEY).encode()
    message = _CONTEXT + f"{int(node_id)}:{token_digest}".encode()
    return hmac.new(secret_key, message, hashlib.sha256).hexdigest()


def token_key(node_id: int, token: str) -> str:
    """The signing key of node `node_id`'s plain token `tdn_...`."""
    return signing_key(node_id, digest(token))


def control_key(node_id: int, *, secret: str | None = None) -> str:
    """The key the control plane signs its Celery messages to node `node_id` with (cancels:
    `inference.wire.send`); the node gets it with its session and checks them. Only the
    control plane and that node know it: another node cannot forge its cancels."""
    secret_key = (secret if secret is not None else settings.SECRET_KEY).encode()
    return hmac.new(secret_key, _CONTROL + str(int(node_id)).encode(), hashlib.sha256).hexdigest()


def redis_password(node_id: int, token_digest: str, *, secret: str | None = None) -> str:
    """The Redis password of node `node_id` holding the token whose digest is `token_digest`
    (`fleet.nodes.redis_acl`): derived, stored nowhere, changed with the token."""
    secret_key = (secret if secret is not None else settings.SECRET_KEY).encode()
    message = _REDIS + f"{int(node_id)}:{token_digest}".encode()
    return hmac.new(secret_key, message, hashlib.sha256).hexdigest()
