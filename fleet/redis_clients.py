"""The one way a Tandem process reaches Redis: the URL from settings, one synchronous client
per thread and one asyncio client per event loop.

Clients are cached by URL as well, because tests (and `manage.py up`, which starts the embedded
Redis after settings are read) change `settings.REDIS_URL` inside a running process. A client
per thread rather than per process: a per-process client shared by daphne's threads was tried
and reverted (see git history of inference/streams.py), and redis-py clients are cheap.
"""

from __future__ import annotations

import threading
import weakref
from asyncio import AbstractEventLoop, get_running_loop

import redis
import redis.asyncio as aioredis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

_local = threading.local()
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
        cached = redis.Redis.from_url(url)
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
