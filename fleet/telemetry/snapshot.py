"""The live snapshot the aggregator keeps in Redis (hash `tandem:live`), read by pages for
their first render and by `/metrics`. Fields: "fleet" (FleetUpdate without node rows),
"p:<id>" (PipelineUpdate), "n:<id>" (node row + stats + cumulative totals), "meta"."""

from __future__ import annotations

import json

import redis as redis_lib
from django.core.exceptions import ImproperlyConfigured

from fleet.telemetry.ingest import client

LIVE_KEY = "tandem:live"
INTEREST_KEY = "tandem:ws:groups"  # zset: group -> expiry (unix s) of its last subscriber


def _load(raw) -> dict | None:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def read_fields(*fields: str, redis: redis_lib.Redis | None = None) -> list[dict | None]:
    try:
        values = (redis or client()).hmget(LIVE_KEY, list(fields))
    except (redis_lib.RedisError, ImproperlyConfigured):  # no Redis: pages render without
        return [None] * len(fields)
    return [_load(v) for v in values]


def read_fleet(*, redis=None) -> dict | None:
    return read_fields("fleet", redis=redis)[0]


def read_pipeline(pipeline_id: int, *, redis=None) -> dict | None:
    return read_fields(f"p:{int(pipeline_id)}", redis=redis)[0]


def read_node(node_id: int, *, redis=None) -> dict | None:
    return read_fields(f"n:{int(node_id)}", redis=redis)[0]


def read_all(*, redis=None) -> dict[str, dict]:
    """Every field (for /metrics)."""
    try:
        raw = (redis or client()).hgetall(LIVE_KEY)
    except (redis_lib.RedisError, ImproperlyConfigured):
        return {}
    out = {}
    for key, value in raw.items():
        loaded = _load(value)
        if loaded is not None:
            out[key.decode() if isinstance(key, bytes) else key] = loaded
    return out
