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

    def __len__(self) -> int:
        return len(self._shapes)

    def entry(self, node_id: int, key: str, name, ts: float) -> dict[str, str]:
        """The stream entry of shape `name` at `ts`, signed with `key` (node_id's key)."""
        head, tail = self._shapes[name]
        return self.signed(node_id, key, f"{head}{float(ts)!r}{tail}")

    def signed(self, node_id: int, key: str, body: str) -> dict[str, str]:
        """The stream entry of an already canonical `body`, signed from the node's cached key
        state (`ingest.sign` would set up the HMAC key each time)."""
        mac = self._macs.get((node_id, key))
        if mac is None:
            mac = self._macs[(node_id, key)] = hmac.new(key.encode(), digestmod=hashlib.sha256)
        signer = mac.copy()  # type: ignore[attr-defined]
        signer.update(body.encode())
        return {"e": f"{node_id} {signer.hexdigest()} {body}"}


_SCALARS = (str, int, float, bool, type(None))


class Encoder:
    """`(node_id, sample, key)` -> the packed, signed stream entry (`pack(encode(...))`), for a
    publisher that builds sample dicts (`manage.py simulate`). A sample whose fields other than
    `ts` are all scalars (a drafter's, an idle node's: the same every tick until the model
    changes) is validated and serialised once per distinct content (`Templates`); any other (a
    verifier's, with its per-tick draws) is validated and serialised in full, and signed from
    the node's cached key state. At most `max_shapes` contents are kept (then started afresh)."""

    def __init__(self, max_shapes: int = 4096) -> None:
        self.max_shapes = max_shapes
        self.templates = Templates()

    def entry(self, node_id: int, sample: dict, key: str) -> dict[str, str]:
        shape = _scalar_shape(sample)
        if shape is None:
            body = json.dumps(normalize(sample), separators=(",", ":"), sort_keys=True)
            return self.templates.signed(node_id, key, body)
        if shape not in self.templates:
            if len(self.templates) >= self.max_shapes:
                self.templates = Templates()
            self.templates.shape(shape, sample)
        return self.templates.entry(node_id, key, shape, sample["ts"])


def _scalar_shape(sample: dict) -> tuple | None:
    """A hashable name of the sample's content without `ts`, or None if a field is a list or
    a dict (or `ts` is missing or not a number)."""
    if not isinstance(sample.get("ts"), (int, float)) or isinstance(sample["ts"], bool):
        return None
    items = []
    for k, v in sample.items():
        if k == "ts":
            continue
        if not isinstance(v, _SCALARS):
            return None
        items.append((k, type(v).__name__, v))  # 1 and 1.0 and True serialise apart
    items.sort()
    return tuple(items)
