"""Lockout of API-key (Bearer `tdm_...`) authentication after repeated failures.

Failures are counted per client address in Redis, so every web process shares the count:
`API_KEY_FAILURE_LIMIT` wrong keys within `API_KEY_LOCKOUT_S` lock that address out of key
authentication for the rest of that window (the window starts at the first failure). While
locked out, every key from that address is refused with 429 and `Retry-After`, the right one
too, so guessing learns nothing. Valid keys never add to the count.
"""

from __future__ import annotations

import logging

from django.conf import settings
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

KEY_PREFIX = "tandem:apikey-failures:"


class KeyAuthLocked(Exception):
    """This address is locked out of API-key authentication for `retry_after` seconds."""

    def __init__(self, retry_after: int):
        super().__init__(f"Too many failed API-key attempts; retry in {retry_after} s.")
        self.retry_after = retry_after


def client_address(request) -> str:
    return request.META.get("REMOTE_ADDR") or "unknown"


def _redis():
    from fleet.redis_clients import client

    return client()


def check(address: str) -> None:
    """Raises KeyAuthLocked while `address` is locked out. Redis down: not locked (the
    failure is logged; refusing every key would take the whole API down with Redis)."""
    key = KEY_PREFIX + address
    try:
        pipe = _redis().pipeline()
        pipe.get(key)
        pipe.ttl(key)
        count, ttl = pipe.execute()
    except RedisError as exc:
        log.warning("API-key lockout not checked (Redis): %r", exc)
        return
    if count is not None and int(count) >= settings.API_KEY_FAILURE_LIMIT:
        raise KeyAuthLocked(max(int(ttl), 1))


def record_failure(address: str) -> None:
    key = KEY_PREFIX + address
    try:
        pipe = _redis().pipeline()  # the window starts at the first failure (Redis 6: no EXPIRE NX)
        pipe.set(key, 0, ex=settings.API_KEY_LOCKOUT_S, nx=True)
        pipe.incr(key)
        pipe.execute()
    except RedisError as exc:
        log.warning("API-key failure not counted (Redis): %r", exc)


def reset_all() -> int:
    """Clears every address's count (tests; an admin after a false alarm)."""
    r = _redis()
    keys = list(r.scan_iter(match=KEY_PREFIX + "*", count=500))
    return r.delete(*keys) if keys else 0
