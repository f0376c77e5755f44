"""Telemetry ingest: node agents put signed samples on a Redis stream; the aggregator reads it.

One XADD per sample (or a pipeline of them), never an HTTP request per sample. Samples are
sharded by node over SHARDS streams (`tandem:telemetry:<shard>`, shard = node id % SHARDS) so
that several aggregator processes can split the fleet (`fleet.telemetry.shards`); a node's
samples always land on one stream, in order. The number is fixed in code (publishers and
aggregators must agree; it is not the number of aggregators, which may change at any time).
Each stream is capped (`MAXLEN ~ STREAM_MAXLEN`) and trimmed by its aggregator once the
rollups covering its entries are written: raw samples are not kept, only rollups are.

Authenticity: an agent holds its node token `tdn_...`; the control plane stores only its
SHA-256 digest. Samples are signed with HMAC-SHA256 under a per-node key DERIVED from the
server's SECRET_KEY, the node id and that digest (`fleet.nodes.signing`): reading the
database is not enough to forge a node's telemetry, and the key is stored nowhere.
Who computes it:
- the aggregator and the simulator: from the digests they read and SECRET_KEY;
- a node worker on the control plane's machine: from its plain token and SECRET_KEY;
- a node worker talking to a remote control plane (TANDEM_API_URL): it receives the key in
  its heartbeat reply, authenticated by its token (it never needs SECRET_KEY).
Bad signatures are dropped and counted; so are replays, stale or future samples and
physically impossible counters (`fleet.telemetry.admission`).

    from fleet.telemetry.ingest import publish_sample
    publish_sample(node_id, {"ts": time.time(), "interval_s": 1.0, ...}, token=plain_token)

(`key=` takes a derived key directly: the simulator, or an agent given it by the control plane.)
The sample's keys are documented in `fleet.telemetry.samples`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable

import redis as redis_lib

from fleet.nodes.redis_keys import TELEMETRY_STREAM
from fleet.nodes.signing import signing_key as signing_key  # re-exported for publishers
from fleet.nodes.signing import token_key
from fleet.redis_clients import client as client  # re-exported: telemetry's publishers
from fleet.redis_clients import redis_url as redis_url
from fleet.telemetry.samples import normalize

STREAM = TELEMETRY_STREAM  # the prefix of the shard streams (named with the node keys)
SHARDS = 16
STREAM_MAXLEN = 50_000  # per shard; aggregators trim acknowledged entries well before this
STREAMS: tuple[str, ...] = tuple(f"{STREAM}:{i}" for i in range(SHARDS))


def shard_of(node_id: int) -> int:
    return int(node_id) % SHARDS


def stream_of(node_id: int) -> str:
    return STREAMS[int(node_id) % SHARDS]


def sign(body: bytes | str, key: str) -> str:
    if isinstance(body, str):
        body = body.encode()
    return hmac.new(key.encode(), body, hashlib.sha256).hexdigest()


def verify(body: bytes | str, signature: str, keys: Iterable[str]) -> bool:
    """Does `signature` match `body` under any of `keys` (a node may hold several tokens)?"""
    return any(hmac.compare_digest(sign(body, key), signature) for key in keys)


class Verifier:
    """`verify` for a long-running reader: each key's HMAC state is computed once and
    copied per sample (a third of the cost of `hmac.new` every time)."""

    def __init__(self) -> None:
        self._macs: dict[str, object] = {}

    def __call__(self, body: bytes | str, signature: bytes | str, keys: Iterable[str]) -> bool:
        if isinstance(body, str):
            body = body.encode()
        if isinstance(signature, str):
            signature = signature.encode()
        for key in keys:
            mac = self._macs.get(key)
            if mac is None:
                if len(self._macs) > 200_000:  # rotated keys pile up: start over
                    self._macs.clear()
                mac = self._macs[key] = hmac.new(key.encode(), digestmod=hashlib.sha256)
            signer = mac.copy()  # type: ignore[attr-defined]
            signer.update(body)
            if hmac.compare_digest(signer.hexdigest().encode(), signature):
                return True
        return False


def encode(node_id: int, sample: dict, *, key: str) -> dict[str, str]:
    """One signed sample: node id, canonical JSON body, signature (`pack` puts it on the
    stream)."""
    body = json.dumps(normalize(sample), separators=(",", ":"), sort_keys=True)
    return {"node": str(int(node_id)), "body": body, "sig": sign(body, key)}


def pack(entry: dict[str, str]) -> dict[str, str]:
    """The stream fields of a signed sample: ONE field, "e" = "<node> <sig> <body>". A
    reader's Redis client parses a third of the bulk strings of the three-field form (the
    aggregator spends ~15 us an entry on parsing alone without hiredis). `unpack` reads both."""
    return {"e": f"{entry['node']} {entry['sig']} {entry['body']}"}


def unpack(fields: dict) -> dict:
    """{"node", "sig", "body"} of a stream entry, packed or in the three-field form (bytes
    or str, as the client gave them). Raises ValueError / KeyError / TypeError if malformed."""
    packed = fields.get(b"e", fields.get("e"))
    if packed is None:
        return {
            "node": fields.get(b"node", fields.get("node")),
            "sig": fields.get(b"sig", fields.get("sig")),
            "body": fields.get(b"body", fields.get("body")),
        }
    sep = b" " if isinstance(packed, bytes) else " "
    node, sig, body = packed.split(sep, 2)
    return {"node": node, "sig": sig, "body": body}


def _key(node_id: int, token: str | None, key: str | None) -> str:
    if (token is None) == (key is None):
        raise ValueError("pass exactly one of token= (plain node token) or key= (derived key)")
    return key if key is not None else token_key(node_id, token)


def publish_sample(
    node_id: int,
    sample: dict,
    *,
    token: str | None = None,
    key: str | None = None,
    redis: redis_lib.Redis | None = None,
) -> str:
    """Validate, sign and XADD one sample; returns the stream entry id.
    Raises `fleet.telemetry.samples.InvalidSample` for a malformed sample."""
    entry = pack(encode(node_id, sample, key=_key(node_id, token, key)))
    r = redis or client()
    entry_id = r.xadd(stream_of(node_id), entry, maxlen=STREAM_MAXLEN, approximate=True)
    return entry_id.decode() if isinstance(entry_id, bytes) else entry_id


def publish_many(
    items: Iterable[tuple[int, dict, str]], *, redis: redis_lib.Redis | None = None
) -> int:
    """Publish (node_id, sample, key) triples in one round trip (simulator, benchmark)."""
    r = redis or client()
    pipe = r.pipeline(transaction=False)
    count = 0
    for node_id, sample, key in items:
        entry = pack(encode(node_id, sample, key=key))
        pipe.xadd(STREAMS[node_id % SHARDS], entry, maxlen=STREAM_MAXLEN, approximate=True)
        count += 1
    pipe.execute()
    return count


def publish_encoded(
    entries: Iterable[tuple[int, dict]], *, redis: redis_lib.Redis | None = None
) -> int:
    """XADD already signed and packed entries (`pack(encode(...))`, or the simulator's
    templated ones) in one round trip: (node_id, entry) pairs."""
    r = redis or client()
    pipe = r.pipeline(transaction=False)
    count = 0
    for node_id, entry in entries:
        pipe.xadd(STREAMS[node_id % SHARDS], entry, maxlen=STREAM_MAXLEN, approximate=True)
        count += 1
    pipe.execute()
    return count
