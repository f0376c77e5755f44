"""The fleet table sorted by a live figure (`?sort=tps&dir=desc`): one rule for the page's first
render (`fleet.console.selectors`) and for its script (`static/js/fleet_sort.js`, fed by the
socket's `fleet.sort` message, `fleet.telemetry.feed.sort_column`).

Both order by the figures the publisher keeps in Redis (`feed.FIGS_KEY`, rounded to what the
table shows, `deltas.figures_of`), so the server's first rows and the script's order agree, and
two nodes that display alike tie and fall back to their names:

- a node without the figure (no sample yet; a drafter's tokens/s, which the table shows as
  "—": its verifiers deliver its tokens) sorts LAST in both directions;
- ties, and the nodes without the figure, by name then id, ascending in both directions;
- `seen` (the "Last sample" column) orders by the sample's age: descending is stalest first.

Pure: no Redis, no database.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Mapping

from fleet.telemetry.deltas import FIG_FIELDS

# The URL's sort key -> the figure's place in a figures list (deltas.FIG_FIELDS).
SORT_FIGS = {
    "power": FIG_FIELDS.index("power_w"),
    "util": FIG_FIELDS.index("util"),
    "batch": FIG_FIELDS.index("batch"),
    "tps": FIG_FIELDS.index("tps"),
    "acc": FIG_FIELDS.index("acc"),
    "seen": FIG_FIELDS.index("seen"),
}
SEEN = FIG_FIELDS.index("seen")


def column(stored: Mapping, key: str, now: float) -> dict[int, float]:
    """Node id -> its figure `key`, from the stored figures (`feed.FIGS_KEY`'s hash: id ->
    figures JSON, bytes or str); the nodes without that figure are left out. `seen` becomes the
    sample's age in whole seconds at `now` (the hash keeps the sample's second)."""
    index = SORT_FIGS[key]
    if not stored:
        return {}
    ids = [int(k) for k in stored]
    raw = [v.decode() if isinstance(v, bytes) else v for v in stored.values()]
    figs = json.loads("[" + ",".join(raw) + "]")  # one parse for every node, not 10,000
    out: dict[int, float] = {}
    for nid, fig in zip(ids, figs, strict=True):
        value = fig[index] if isinstance(fig, list) and len(fig) > index else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        out[nid] = max(0, round(now - value)) if index == SEEN else value
    return out


def value_of(values: Mapping[int, float], key: str, node_id: int, role: str | None):
    """The figure a node sorts by, or None (sorted last): a drafter's zero tokens/s is none."""
    value = values.get(node_id)
    if key == "tps" and role == "draft" and not value:
        return None
    return value


def first(
    rows: Iterable[tuple[int, str, str | None]],
    values: Mapping[int, float],
    key: str,
    *,
    descending: bool,
    n: int,
) -> list[int]:
    """The ids of the first `n` of `rows` ((id, name, role) each) in the table's order by
    `key`: the figure (descending or not), then name and id; the nodes without it last."""
    sign = -1 if descending else 1
    having: list[tuple[float, str, int]] = []
    lacking: list[tuple[str, int]] = []
    for nid, name, role in rows:
        value = value_of(values, key, nid, role)
        if value is None:
            lacking.append((name, nid))
        else:
            having.append((sign * value, name, nid))
    top = [nid for _, _, nid in heapq.nsmallest(n, having)]
    if len(top) < n:
        top += [nid for _, nid in heapq.nsmallest(n - len(top), lacking)]
    return top
