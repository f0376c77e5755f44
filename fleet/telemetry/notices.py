"""Node state changes reach the aggregators at once, not at their next registry refresh.

The node services post the ids of the nodes they changed (drain, lost, retire, new tokens;
a move through `registry_changed_after_commit`) after their transaction commits
(`fleet.nodes.notices.post`). Every aggregator reads the notices on its
next tick and reloads just those nodes (`registry.load_nodes`, in a thread), so the fleet view
shows the change within a tick or two (< 2 s), whatever the size of the fleet.
"""

from __future__ import annotations

from fleet.nodes.notices import STREAM as STREAM
from fleet.nodes.notices import post as post


async def read(r, agg) -> set[int]:
    """The node ids noticed since the last read (and those requeued while a reload ran)."""
    got = await r.xread({STREAM: agg._notices_id}, count=1000)
    ids: set[int] = set(agg.requeued)
    agg.requeued.clear()
    for _stream, entries in got or []:
        for entry_id, fields in entries:
            agg._notices_id = entry_id
            raw = fields.get(b"nodes", b"")
            ids.update(int(n) for n in raw.decode().split(",") if n.isdigit())
    return ids
