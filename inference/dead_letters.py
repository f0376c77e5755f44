"""The ledger's dead-letter stream: node reports it will never store, each with the reason.

A bad day (the database away, a lock timeout) is retried: nothing is acknowledged, the batch
comes again. Bad data is not: a report that can never be stored as sent -- a non-finite
number, an over-long field, a shape the ledger does not know, a finish that does not fit its
request, a constraint the database refuses -- goes here, once, and the ledger moves on, so
one entry never stops the ledger for every pipeline.

Each dead letter keeps the original entry (node, body, signature), its stream id and the
reason; the stream is capped (MAXLEN). Operators see the count in `/metrics`
(`tandem:ledger_dead_letters_total`, beside `tandem:ledger_entries_total{outcome}`) and the
last few on the console's home page (`inference.ledger_report`); `recent()` reads them.

Written after the batch's transaction committed and before it is acknowledged, under the
original entry's id: a batch replayed after a crash in between writes none twice.
"""

from __future__ import annotations

import time
from typing import Any

import redis as redis_lib

from fleet import redis_clients
from inference import node_reports

MAXLEN = 10_000
BODY_MAX = 64 * 1024  # what is kept of a body (a finish can be long)
OUTCOMES = ("applied", "refused", "malformed", "bad_data")


def stream() -> str:
    return f"{node_reports.STREAM}:dead"


def _str(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def letter(entry_id: Any, fields: Any, reason: str) -> tuple[str, dict[str, str]]:
    """(original id, dead-letter fields) of a stream entry set aside for `reason`."""
    get = fields.get if hasattr(fields, "get") else (lambda *_: None)

    def field(name: str) -> str:
        raw = get(name.encode(), get(name))
        return "" if raw is None else _str(raw)

    return _str(entry_id), {
        "node": field("node")[:40],
        "body": field("body")[:BODY_MAX],
        "sig": field("sig")[:200],
        "reason": reason[:1000],
        "at": f"{time.time():.3f}",
    }


def put(r: redis_lib.Redis, letters: list[tuple[str, dict[str, str]]]) -> None:
    """XADD each letter under its original entry's id; one already there (a replayed batch)
    is not written again. An id below the stream's top that is not there (the ledger stream
    was reset) gets a new id."""
    name = stream()
    for entry_id, fields in letters:
        try:
            r.xadd(name, fields, id=entry_id, maxlen=MAXLEN, approximate=True)  # type: ignore[arg-type]
        except redis_lib.ResponseError:
            if not r.xrange(name, min=entry_id, max=entry_id):
                r.xadd(name, fields, maxlen=MAXLEN, approximate=True)  # type: ignore[arg-type]


def recent(n: int = 5, *, client: redis_lib.Redis | None = None) -> list[dict[str, str]]:
    """The last `n` dead letters, newest first: entry, node, reason, at (unix seconds)."""
    r = client or redis_clients.client()
    out = []
    entries: Any = r.xrevrange(stream(), count=n)
    for entry_id, fields in entries:
        item = {_str(k): _str(v) for k, v in (fields or {}).items()}
        out.append(
            {"entry": _str(entry_id), **{k: item.get(k, "") for k in ("node", "reason", "at")}}
        )
    return out
