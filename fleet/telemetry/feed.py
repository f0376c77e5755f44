"""The fleet page's feed in Redis and on the channel layer (the deltas of
`fleet.telemetry.deltas`, written and read).

Redis keeps, for late joiners and clients that lost their place:
  `tandem:fleet:feed`  hash: epoch, seq, head (FleetHead JSON), rows (every row, JSON);
                       rewritten together (MULTI) so a reader never mixes two ticks
  `tandem:fleet:figs`  hash: node id -> its figures JSON, rewritten only when they moved
(both expire FEED_TTL_MS after the last tick: a stopped aggregator's rows do not linger).
Every tick the publisher writes these, then sends the group ONE event, `fleet.tick`, with the
delta's text; each consumer adds the figures of the rows its browser shows and forwards it.
A page sorted by a live figure gets that figure of every node (`sort_column`) every few
seconds, read from the figures hash (`fleet.telemetry.fig_order`).
"""

from __future__ import annotations

import time

from fleet.telemetry import fig_order, payloads
from fleet.telemetry.deltas import FeedBuilder, Step, snapshot_text

FEED_KEY = "tandem:fleet:feed"
FIGS_KEY = "tandem:fleet:figs"
FEED_TTL_MS = 30_000  # no publisher for this long: joiners get rows from the database
TICK_EVENT = "fleet.tick"  # handled by consumers' `fleet_tick`


async def publish(owner, r, layer, built: dict, now: float) -> Step:
    """The fleet group's message of one tick. `owner` (the publishing aggregator) keeps the
    FeedBuilder (what it sent last) as `owner.fleet_feed`; `built` is Aggregation.build()'s."""
    builder = getattr(owner, "fleet_feed", None)
    if builder is None:
        builder = owner.fleet_feed = FeedBuilder()
    step = builder.step(built["node_rows"].values(), built["wall"], now)
    await store(r, step)
    await layer.group_send(
        payloads.GROUP_FLEET,
        {"type": TICK_EVENT, "epoch": step.epoch, "seq": step.seq, "text": step.text},
    )
    return step


async def store(r, step: Step) -> None:
    """Write the step before it is sent: a reader that got seq N from Redis then gets N+1."""
    pipe = r.pipeline(transaction=True)
    if step.first:  # a new publisher: figures of another epoch may name retired nodes
        pipe.delete(FIGS_KEY)
    elif step.gone:
        pipe.hdel(FIGS_KEY, *(str(nid) for nid in step.gone))
    if step.figs:
        pipe.hset(FIGS_KEY, mapping={str(nid): fig for nid, fig in step.figs.items()})
    mapping = {"epoch": step.epoch, "seq": step.seq, "head": step.head}
    if step.rows is not None:
        mapping["rows"] = step.rows
    pipe.hset(FEED_KEY, mapping=mapping)
    pipe.pexpire(FEED_KEY, FEED_TTL_MS)
    pipe.pexpire(FIGS_KEY, FEED_TTL_MS)
    await pipe.execute()


async def read_snapshot(r) -> tuple[str, int, str] | None:
    """(epoch, seq, the latest snapshot message's text), or None when nobody published."""
    epoch, seq, head, rows = await r.hmget(FEED_KEY, ["epoch", "seq", "head", "rows"])
    if epoch is None or seq is None or head is None or rows is None:
        return None
    epoch, seq = epoch.decode(), int(seq)
    return epoch, seq, snapshot_text(epoch=epoch, seq=seq, head=head.decode(), rows=rows.decode())


async def read_figures(r, ids: list[int]) -> dict[int, str]:
    """The stored figures of `ids` (those the publisher has)."""
    if not ids:
        return {}
    values = await r.hmget(FIGS_KEY, [str(i) for i in ids])
    return {nid: raw.decode() for nid, raw in zip(ids, values, strict=True) if raw is not None}


# key -> (monotonic time, message text): the sockets of one process sorted alike share a read
_columns: dict[str, tuple[float, str]] = {}
COLUMN_REUSE_S = 0.5  # the publisher's tick: a column is not read twice in one


async def sort_column(r, key: str) -> str:
    """The `fleet.sort` message (payloads.FleetSort) of live figure `key`: every node that has
    it, at most one tick old. ~12 bytes a node (120 KB at 10,000 nodes)."""
    now = time.monotonic()
    cached = _columns.get(key)
    if cached is not None and now - cached[0] < COLUMN_REUSE_S:
        return cached[1]
    values = fig_order.column(await r.hgetall(FIGS_KEY), key, time.time())
    message: payloads.FleetSort = {
        "type": "fleet.sort",
        "key": key,
        "ids": list(values),
        "vals": list(values.values()),
    }
    text = payloads.encode(message)
    _columns[key] = (now, text)
    return text


def read_column(key: str) -> dict[int, float]:
    """Live figure `key` of every node that has it, for a page's first render (synchronous;
    empty without Redis or without a publisher: the page then shows its rows by name)."""
    import redis as redis_lib
    from django.core.exceptions import ImproperlyConfigured

    from fleet.telemetry.ingest import client

    try:
        stored = client().hgetall(FIGS_KEY)
    except (redis_lib.RedisError, ImproperlyConfigured):
        return {}
    return fig_order.column(stored, key, time.time())


def snapshot_from_db() -> tuple[str, int, str]:
    """A snapshot built on join when no publisher has written one (no aggregator yet): the
    rows from the database, no figures, epoch "" (the first delta of a publisher then differs,
    and the client asks again)."""
    import json

    from fleet.nodes.models import Node
    from fleet.pipelines.models import Pipeline
    from fleet.telemetry.snapshot import read_fleet

    fields = ("id", "name", "state", "placement__role", "placement__pipeline_id", "simulated")
    rows = [
        [nid, name, state, role, pipeline, 1 if sim else 0, kind]
        for nid, name, state, role, pipeline, sim, kind in Node.objects.not_retired()
        .order_by("id")
        .values_list(*fields, "profile__kind")
    ]
    fleet = read_fleet() or {}
    head = {
        "ts": None,
        "newest_ts": None,
        "totals": fleet.get("totals"),
        "kpis": fleet.get("kpis"),
        "kpis_simulated": fleet.get("kpis_simulated"),
        "pipes": [[p.id, p.name] for p in Pipeline.objects.only("id", "name").order_by("id")],
    }
    dumps = json.dumps
    return "", 0, snapshot_text(epoch="", seq=0, head=dumps(head), rows=dumps(rows))
