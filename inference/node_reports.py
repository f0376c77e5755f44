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

A well-signed body is parsed strictly (`parse`): `NaN`, `Infinity` and numbers that overflow
to them (`1e999`) are refused here, where the message is read, as are reports of the wrong
shape (`inference.report_checks`); the ledger sets such an entry aside (its dead-letter
stream) instead of retrying it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from typing import Any

from fleet.nodes.redis_keys import LEDGER_STREAM
from inference.report_checks import BadReport, check_shape

STREAM = LEDGER_STREAM  # named with the other node keys, for the nodes' ACL
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


def _no_constant(name: str):
    raise BadReport(f"non-finite number {name} in the report")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadReport(f"number {text[:40]} overflows to infinity")
    return value


def loads(text: str | bytes) -> Any:
    """`json.loads` that refuses NaN, Infinity and numbers beyond a float's range (BadReport,
    or ValueError for text that is not JSON)."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite)


def parse(body: str) -> dict:
    """The report in a body, strictly: JSON without non-finite numbers, a known kind, the
    fields its kind needs, of sane types and lengths. Raises BadReport."""
    try:
        report = loads(body)
    except BadReport:
        raise
    except ValueError as exc:
        raise BadReport(f"the body is not JSON: {exc}") from exc
    if not isinstance(report, dict) or report.get("kind") not in KINDS:
        raise BadReport("the body is not a report (an object with a known kind)")
    check_shape(report)
    return report


def verified(node_id: int, body: str, signature: str, keys: list[str]) -> dict | None:
    """The report if `signature` is the node's under one of `keys` (a node may hold several
    tokens); None when it is not. A well-signed body that is not a storable report raises
    BadReport (the node sent it: it is set aside with the reason, not silently refused)."""
    if not any(hmac.compare_digest(sign(node_id, body, k), signature) for k in keys):
        return None
    return parse(body)
