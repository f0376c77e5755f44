"""What the ledger tells operators: its counters for `/metrics` (`LedgerCollector`) and the
dead letters' count and last few for the console (`summary`), from the ledger's stats hash
(`ledger.stats`) and its dead-letter stream (`dead_letters`)."""

from __future__ import annotations

import redis as redis_lib
from prometheus_client.core import CounterMetricFamily

from fleet import redis_clients
from inference.dead_letters import OUTCOMES, recent
from inference.ledger import stats


def summary(*, client: redis_lib.Redis | None = None) -> dict | None:
    """{"count", "recent"} for the console; None without Redis."""
    try:
        r = client or redis_clients.client()
        count = stats(r).get("dead_letters", 0)
        return {"count": count, "recent": recent(3, client=r) if count else []}
    except (redis_lib.RedisError, OSError):
        return None


class LedgerCollector:
    """The ledger's counters for `/metrics` (an empty scrape of them without Redis)."""

    def collect(self):
        try:
            counts = stats()
        except (redis_lib.RedisError, OSError):
            counts = {}
        dead = CounterMetricFamily(
            "tandem:ledger_dead_letters",
            "Node reports the ledger set aside as data it can never store (its dead-letter "
            "stream), since the stream began.",
        )
        dead.add_metric([], counts.get("dead_letters", 0))
        yield dead
        entries = CounterMetricFamily(
            "tandem:ledger_entries", "Node reports the ledger read, by outcome.", labels=["outcome"]
        )
        for outcome in OUTCOMES:
            entries.add_metric([outcome], counts.get(outcome, 0))
        yield entries
