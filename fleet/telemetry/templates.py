"""Signed samples in bulk, cheaply: the simulator's and the benchmark's publishing path.

`ingest.encode()` validates, serialises and signs each sample from scratch (~60 us). A
simulated fleet sends the same few shapes of sample over and over, only the time moving, so
`Templates` validates and serialises a shape ONCE, with a placeholder for `ts`; each sample is
then two string joins, an HMAC from the node's precomputed key state and an XADD in a
pipeline (`ingest.publish_encoded`). The entries are exactly `pack(encode())` of the same
sample (tests/telemetry/test_templates.py): the aggregator verifies them the same way.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from fleet.telemetry.samples import normalize

_TS_ZERO = '"ts":0.0'


class Templates:
    def __init__(self) -> None:
        self._shapes: dict[object, tuple[str, str]] = {}
        self._macs: dict[tuple[int, str], object] = {}

    def shape(self, name, sample: dict) -> None:
        """Register a sample shape (any `ts`): validated and serialised now."""
        body = json.dumps(normalize({**sample, "ts": 0.0}), separators=(",", ":"), sort_keys=True)
        head, sep, tail = body.partition(_TS_ZERO)
        if not sep or _TS_ZERO in tail:
            raise ValueError("a sample body holds its ts exactly once")
        self._shapes[name] = (head + '"ts":', tail)

    def __contains__(self, name) -> bool:
        return name in self._shapes

    def entry(self, node_id: int, key: str, name, ts: float) -> dict[str, str]:
        """The stream entry of shape `name` at `ts`, signed with `key` (node_id's key)."""
        head, tail = self._shapes[name]
        body = f"{head}{float(ts)!r}{tail}"
        mac = self._macs.get((node_id, key))
        if mac is None:
            mac = self._macs[(node_id, key)] = hmac.new(key.encode(), digestmod=hashlib.sha256)
        signer = mac.copy()  # type: ignore[attr-defined]
        signer.update(body.encode())
        return {"e": f"{node_id} {signer.hexdigest()} {body}"}
