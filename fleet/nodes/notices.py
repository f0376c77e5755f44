"""Registry-change notices: the node ids a service changed, posted after its commit.

The telemetry aggregators read them on their next tick and reload just those nodes
(`fleet.telemetry.notices`), so a drain, a lost or retired node, a move shows on the fleet
view within a tick or two, without waiting for a registry refresh. Best effort: without
Redis the aggregators' periodic refresh still brings the change.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

STREAM = "tandem:registry:changes"
MAXLEN = 10_000


def post(node_ids) -> None:
    """Tell the aggregators these nodes changed (call after commit)."""
    ids = [int(n) for n in node_ids]
    if not ids:
        return
    try:
        from fleet.redis_clients import client

        client().xadd(STREAM, {"nodes": ",".join(map(str, ids))}, maxlen=MAXLEN, approximate=True)
    except Exception:  # Redis away or not configured: the periodic refresh catches up
        log.debug("notices: could not post %s", ids, exc_info=True)
