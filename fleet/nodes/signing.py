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


def signing_key(node_id: int, token_digest: str, *, secret: str | None = None) -> str:
    """The signing key of node `node_id` holding the token whose digest (what the nodes app
    stores) is `token_digest`."""
    secret_key = (secret if secret is not None else settings.SECRET_KEY).encode()
    message = _CONTEXT + f"{int(node_id)}:{token_digest}".encode()
    return hmac.new(secret_key, message, hashlib.sha256).hexdigest()


def token_key(node_id: int, token: str) -> str:
    """The signing key of node `node_id`'s plain token `tdn_...`."""
    return signing_key(node_id, digest(token))
