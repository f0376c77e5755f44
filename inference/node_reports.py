"""What a node worker reports to the control plane about the generations it runs: claims,
first tokens and finishes, as signed entries of ONE Redis stream that the ledger consumer
(`inference.ledger`) applies to the database. Torch-free and database-free: both sides
import it.

A node never writes the database (it holds no DATABASE_URL): it XADDs entries

    {"node": "<id>", "body": "<canonical JSON>", "sig": "<hex HMAC-SHA256>"}

to `tandem:ledger`. The body is one report:

    {"kind": "claim", "starts": [["<gen>", <attempt>], ...]}
    {"kind": "first_token", "ids": ["<gen>", ...], "at": <unix seconds>}
    {"kind": "finish", "gen": "<gen>", "attempt": <n>, "finish_reason": "..",
     "output_tokens": [..], "output_text": "..", "counters": {..}, "itl_ms": {..},
     "error": ".."}

Signed, not ACL-fenced: each entry is signed with the node's own key, the one its telemetry
is signed with (`fleet.nodes.signing`: derived from SECRET_KEY, the node id and its token's
digest; the node gets it from the control plane over its token-authenticated API and never
holds SECRET_KEY). The MAC covers a context string, the node id and the body, so an entry
cannot be re-labelled as another node's. The consumer refuses (and counts) an entry whose
signature does not match the keys of the node it names, and applies a well-signed one only
to generations assigned to that node. Per-node Redis ACL users were the alternative: they
need every deployment's Redis to be provisioned per node (the embedded one and compose's are
not), and they fence keys, not meaning: a node may still write its own keys with lies in
them. Signing works on any Redis and makes the check where the database is written.

Every report is idempotent by (generation, attempt): applying one twice changes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

STREAM = "tandem:ledger"
STREAM_MAXLEN = 200_000  # entries are acknowledged within milliseconds; this is a backstop
KINDS = frozenset({"claim", "first_token", "finish"})
_CONTEXT = b"tandem/ledger/v1\0"


def sign(node_id: int, body: str, key: str) -> str:
    message = _CONTEXT + f"{int(node_id)}\0".encode() + body.encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def encode(node_id: int, report: dict[str, Any], *, key: str) -> dict[Any, Any]:
    """The stream entry of one report of node `node_id`, signed with its key."""
    if report.get("kind") not in KINDS:
        raise ValueError(f"unknown report kind {report.get('kind')!r}")
    body = json.dumps(report, separators=(",", ":"), sort_keys=True)
    return {"node": str(int(node_id)), "body": body, "sig": sign(node_id, body, key)}


def _text(fields: Any, name: str) -> str:
    raw = fields.get(name.encode(), fields.get(name))
    if raw is None:
        raise ValueError(f"entry has no {name!r}")
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def decode(fields: Any) -> tuple[int, str, str]:
    """(node id, body, signature) of a stream entry; ValueError when malformed."""
    node = _text(fields, "node")
    if not node.isdigit():
        raise ValueError(f"bad node id {node!r}")
    return int(node), _text(fields, "body"), _text(fields, "sig")


def verified(node_id: int, body: str, signature: str, keys: list[str]) -> dict | None:
    """The report if `signature` is the node's under one of `keys` (a node may hold several
    tokens) and the body is a report; None otherwise."""
    if not any(hmac.compare_digest(sign(node_id, body, k), signature) for k in keys):
        return None
    try:
        report = json.loads(body)
    except ValueError:
        return None
    if not isinstance(report, dict) or report.get("kind") not in KINDS:
        return None
    return report
