"""Which sequences a canary draft drafts for: a pure function of the generation id and the
canary's share, computed alike by the drafter (which engine drafts it) and the control plane
(which arm a finished generation's counters belong to). No Django, no torch."""

from __future__ import annotations

import hashlib


def bucket(seq_id: str) -> float:
    """A uniform number in [0, 1) fixed by the sequence id (re-routed attempts keep theirs)."""
    digest = hashlib.sha256(str(seq_id).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def in_canary(seq_id: str, fraction: float) -> bool:
    return bucket(seq_id) < fraction
