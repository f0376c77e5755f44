"""The one way a Tandem process reaches Redis: the URL from settings, ONE connection pool per
process for the synchronous clients (a client object per thread, all drawing on that pool) and
one asyncio client, with its pool, per event loop (asyncio connections belong to their loop).

Clients are cached by URL as well, because tests (and `manage.py up`, which starts the embedded
Redis after settings are read) change `settings.REDIS_URL` inside a running process. The pool
is shared, not the client object: a per-process client shared by daphne's threads was tried
and reverted (see git history of inference/streams.py); a thread's commands check a connection
out of the pool and give it back, so N threads hold at most N connections, and a new thread
(daphne's sync_to_async executors come and go) opens none. redis-py pools notice a fork.
"""

from __future__ import annotations

import threading
import weakref
from asyncio import AbstractEventLoop, get_running_loop

import redis
import redis.asyncio as aioredis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# A leader lock's refresh (the aggregator's, the ledger's): extend the lock while we hold it;
# take it back if it lapsed (a long stall) and nobody else took it; 0 only when another process
# leads now. Atomic. KEYS[1] the lock, ARGV[1] our id, ARGV[2] the TTL in ms.
REFRESH_LEADER_LOCK = """
local holder = redis.call('get', KEYS[1])
if holder == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
if not holder then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""

_local = threading.local()
_pools: dict[str, redis.ConnectionPool] = {}
_pools_lock = threading.Lock()
_async_clients: weakref.WeakKeyDictionary[AbstractEventLoop, tuple[str, aioredis.Redis]] = (
    weakref.WeakKeyDictionary()
)


def redis_url() -> str:
    if not settings.REDIS_URL:
        raise ImproperlyConfigured(
            "REDIS_URL is not set and no embedded Redis is running: set REDIS_URL or start "
            "Tandem with `make up`."
        )
    return settings.REDIS_URL


def client() -> redis.Redis:
    """This thread's client of `settings.REDIS_URL`."""
    url = redis_url()
    cached = getattr(_local, "client", None)
    if cached is None or getattr(_local, "url", None) != url:
        with _pools_lock:
            pool = _pools.get(url)
            if pool is None:
                pool = _pools[url] = redis.ConnectionPool.from_url(url)
        cached = redis.Redis(connection_pool=pool)
        _local.client, _local.url = cached, url
    return cached


def async_client() -> aioredis.Redis:
    """The running event loop's asyncio client of `settings.REDIS_URL`."""
    url = redis_url()
    loop = get_running_loop()
    cached = _async_clients.get(loop)
    if cached is None or cached[0] != url:
        cached = _async_clients[loop] = (url, aioredis.Redis.from_url(url))
    return cached[1]
