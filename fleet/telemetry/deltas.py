"""The fleet page's feed as deltas: what changed in the fleet since the previous tick.

At 10,000 nodes a message with every node row is ~2 MB; sent twice a second it is 4 MB/s to
each browser. So the fleet group gets, per tick, ONE message with only what changed:

- `rows`: the node rows (identity and state: what the table filters and sorts on) that were
  added or changed since the previous tick, `gone`: the ids of nodes that left the fleet;
- the headline figures (`totals`, `kpis`, `kpis_simulated`) and, when a pipeline was added,
  renamed or deleted, its names (`pipes`);
- `figs`: each node's live figures (power, utilization, batch, tokens/s, acceptance, last
  sample), rounded to what the table displays. Those of every node move every second (noise
  is finer than a watt), so they are NOT broadcast: they are kept in Redis, one hash field per
  node, rewritten only when the rounded value moved, and each socket's consumer adds to the
  message the figures of the rows its browser shows (`{"action": "view", "ids": [...]}`).

Messages are numbered: `epoch` (one per publisher: a restarted or new leader starts another)
and `seq` (+1 per tick). A client applies a delta only onto `seq - 1` of the same epoch;
otherwise it asks for a snapshot (`{"action": "snapshot"}`), which the consumer reads from the
publisher's copy in Redis.

This module is pure (no Redis, no event loop): `FeedBuilder.step` turns one tick's node rows
into a `Step`; `fleet.telemetry.feed` writes and sends it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleet.telemetry import payloads

# Row: [id, name, state, role, pipeline, sim (0/1), kind]. Figures: FIG_FIELDS, rounded.
ROW_FIELDS = ("id", "name", "state", "role", "pipeline", "sim", "kind")
FIG_FIELDS = ("power_w", "src", "util", "batch", "tps", "acc", "seen")


# One encoder, made once: json.dumps() with options builds a new one per call, which is most
# of the cost of 10,000 small figure lists per tick.
_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def row_of(node: payloads.NodeRow) -> list:
    return [
        node["id"],
        node["name"],
        node["state"],
        node["role"],
        node["pipeline"],
        1 if node["sim"] else 0,
        node["kind"],
    ]


def _num(value: float | None, digits: int) -> float | int | None:
    if value is None:
        return None
    out = round(float(value), digits)
    return int(out) if digits <= 0 else out


def figures_of(node: payloads.NodeRow, now: float) -> list:
    """A node's live figures at the precision the fleet table shows them (static/js/live.js:
    watts() 1 W, or 0.1 kW from 10 kW; pct(util, 0) 1 %; fmt(batch, 1); fmt(tps, 1), or 0.1 k
    from 10,000; pct(acc) 0.1 %), and the second of its last sample (its age is counted in the
    browser). Two values that display alike are equal here, so noise below what is shown never
    goes out."""
    power = node["power_w"]
    tps = node["tps"]
    seen = node["seen_s"]
    return [
        _num(power, 0) if power is None or power < 10_000 else _num(power, -2),
        node["src"],
        _num(node["util"], 2),
        _num(node["batch"], 1),
        _num(tps, 1) if tps is None or tps < 10_000 else _num(tps, -2),
        _num(node["acc"], 3),
        None if seen is None else int(round(now - seen)),
    ]


@dataclass
class Step:
    """What one tick publishes."""

    epoch: str
    seq: int
    text: str  # the delta message, encoded once for every socket (FleetDelta, without `figs`)
    head: str  # the snapshot's figures part (FleetHead), for late joiners
    rows: str | None  # every row (JSON list), only when a row changed: the snapshot's rows
    figs: dict[int, str] = field(default_factory=dict)  # node id -> figures JSON, changed only
    gone: list[int] = field(default_factory=list)
    first: bool = False  # the first step of this epoch: rewrite every figure, drop the rest


class FeedBuilder:
    """Remembers what it published last and returns what moved since (clock-free: `now` is
    passed in). One per publisher; a new one starts a new epoch."""

    def __init__(self, *, epoch: str | None = None) -> None:
        self.epoch = epoch or uuid.uuid4().hex[:12]
        self.seq = 0
        self.rows: dict[int, list] = {}
        self.figs: dict[int, list] = {}
        self.pipes: dict[int, str] = {}

    def step(
        self,
        nodes: Iterable[payloads.NodeRow],
        summary: payloads.FleetUpdate,
        now: float,
    ) -> Step:
        self.seq += 1
        first = self.seq == 1
        rows: dict[int, list] = {}
        figs: dict[int, list] = {}
        changed_rows: list[list] = []
        changed_figs: dict[int, str] = {}
        for node in nodes:
            nid = node["id"]
            row = row_of(node)
            rows[nid] = row
            if self.rows.get(nid) != row:
                changed_rows.append(row)
            fig = figures_of(node, now)
            figs[nid] = fig
            if first or self.figs.get(nid) != fig:  # encoded only when it moved
                changed_figs[nid] = _dumps(fig)
        gone = sorted(nid for nid in self.rows if nid not in rows)
        pipes = {p["id"]: p["name"] for p in summary.get("pipelines", [])}
        rows_changed = bool(changed_rows or gone) or first
        delta: payloads.FleetDelta = {
            "type": "fleet.update",
            "epoch": self.epoch,
            "seq": self.seq,
            "ts": summary["ts"],
            "newest_ts": summary["newest_ts"],
            "totals": summary["totals"],
            "kpis": summary["kpis"],
            "kpis_simulated": summary["kpis_simulated"],
            # the first step of an epoch carries no rows: every client resyncs on a new epoch
            "rows": [] if first else changed_rows,
            "gone": [] if first else gone,
        }
        if pipes != self.pipes or first:
            delta["pipes"] = [[pid, name] for pid, name in pipes.items()]
        head: payloads.FleetHead = {
            "ts": summary["ts"],
            "newest_ts": summary["newest_ts"],
            "totals": summary["totals"],
            "kpis": summary["kpis"],
            "kpis_simulated": summary["kpis_simulated"],
            "pipes": [[pid, name] for pid, name in pipes.items()],
        }
        self.rows, self.figs, self.pipes = rows, figs, pipes
        return Step(
            epoch=self.epoch,
            seq=self.seq,
            text=payloads.encode(delta),
            head=_dumps(head),
            rows=_dumps(list(rows.values())) if rows_changed else None,
            figs=changed_figs,
            gone=gone,
            first=first,
        )


def with_figures(text: str, figs: dict[int, str] | dict[str, str]) -> str:
    """The delta `text` (a JSON object) with `"figs": {id: figures}` added, without decoding
    it again: every socket of the group shares `text`; only its figures differ."""
    if not figs:
        return text
    body = ",".join(f'"{int(nid)}":{fig}' for nid, fig in figs.items())
    return f'{text[:-1]},"figs":{{{body}}}}}'


def snapshot_text(*, epoch: str, seq: int, head: str, rows: str) -> str:
    """The snapshot message (FleetSnapshot) from the publisher's stored parts: the head's
    fields (a JSON object's) and the rows, joined without decoding them."""
    return (
        f'{{"type":"fleet.snapshot","epoch":{_dumps(epoch)},"seq":{int(seq)},'
        f'{head[1:-1]},"rows":{rows}}}'
    )
