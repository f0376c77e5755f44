"""One node's live state in the aggregator: its sliding window, the open rollup buckets, the
figures of its row in the merge, and its counters since the start.

Pure arithmetic over `Acc` sums (no loop, Redis or database; tests/test_walls.py guards it).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from fleet.telemetry.accumulators import Acc


@dataclass
class NodeLive:
    window: deque = field(default_factory=deque)  # (arrival, expires, sample)
    live: Acc = field(default_factory=Acc)
    total: Acc = field(default_factory=Acc)  # closed buckets since the start (+ bucket)
    bucket: Acc = field(default_factory=Acc)  # current 10 s rollup bucket
    long: Acc = field(default_factory=Acc)  # current 5 min rollup bucket
    last: dict | None = None
    last_arrival: float = 0.0
    dirty: bool = True  # the window changed since `fig` was computed
    fig: list | None = None  # the row figures (merge.POWER ...), None: no live samples
    stats: dict | None = None  # derive(live), computed when asked (`Aggregation.stats_of`)
    stats_fresh: bool = False
    last_measured: dict | None = None  # LastMeasured without age_s
    written_at: float = -math.inf  # its snapshot field
    snap_dirty: bool = True  # its figures or facts changed since that was written


def node_figures(acc: Acc) -> list:
    """The row figures of a node's window, as derive() computes them (power_w, src, util,
    batch, tps, acc), without the rest of derive()'s work."""
    span = acc.dur if acc.dur > 1e-9 else 0.0
    steps = sum(acc.batch_hist.values())
    batch = (
        round(sum(size * count for size, count in acc.batch_hist.items()) / steps, 2)
        if steps > 0
        else None
    )
    return [
        round(acc.power_int / span, 1) if span else None,
        None,  # src: the last sample's, filled in by _refresh
        round(acc.util_int / acc.dur, 3) if acc.dur > 0 else None,
        batch,
        round(acc.gen_tokens / span, 2) if span else None,
        round(acc.accepted / acc.draft_tokens, 4) if acc.draft_tokens > 0 else None,
    ]


def node_totals(state: NodeLive, *open_accs: Acc) -> dict:
    t = state.total.copy()
    for acc in (state.bucket, *open_accs):
        t.add(acc)
    last = state.last or {}
    return {
        "num_drafts": t.drafts,
        "num_draft_tokens": t.draft_tokens,
        "num_accepted_tokens": t.accepted,
        "num_accepted_tokens_per_pos": t.per_pos,
        "num_draft_tokens_per_pos": t.per_pos_drafts,
        "generation_tokens": t.gen_tokens,
        "ttft_hist": t.ttft_hist,
        "ttft_sum": t.ttft_sum,
        "itl_hist": t.itl_hist,
        "itl_sum": t.itl_sum,
        "energy_draft_j": t.energy_draft,
        "energy_verify_j": t.energy_verify,
        "power_w": last.get("power_w"),
        "power_source": last.get("power_source"),
        "running": last.get("num_requests_running"),
        "waiting": last.get("num_requests_waiting"),
        "utilization": last.get("utilization"),
    }
