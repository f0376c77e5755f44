"""Token streams: one Redis stream per generation, `tandem:gen:<uuid>`.

Workers `publish()` events (sync); the web side `follow()`s them (async, redis.asyncio) or
reads them at once with `read_all()`. Events are JSON objects:

    {"type": "tokens", "tokens": [..], "text": "..", "n": <total so far>}
    {"type": "done", "finish_reason": "..", "usage": {"prompt_tokens": .., "completion_tokens": ..}}
    {"type": "error", "error": ".."}
    {"type": "requeued", "reason": ".."}   # after a re-route; tokens are NOT resent

A stream is trimmed approximately to MAXLEN entries and expires TTL_S after its terminal
event. `follow()` ends after a done or error event.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import AsyncIterator
from typing import Any, Literal, TypedDict

import redis
import redis.asyncio as aioredis
from django.conf import settings

MAXLEN = 10_000
TTL_S = 3600
TERMINAL_TYPES = frozenset({"done", "error"})


class TokensEvent(TypedDict):
    type: Literal["tokens"]
    tokens: list[int]
    text: str
    n: int


class DoneEvent(TypedDict):
    type: Literal["done"]
    finish_reason: str
    usage: dict[str, int]


class ErrorEvent(TypedDict):
    type: Literal["error"]
    error: str


class RequeuedEvent(TypedDict):
    type: Literal["requeued"]
    reason: str


Event = TokensEvent | DoneEvent | ErrorEvent | RequeuedEvent


_ENTRY_ID = re.compile(r"\A([0-9]{1,20})(?:-([0-9]{1,20}))?\Z")
_U64_MAX = 2**64 - 1


def is_entry_id(text: str) -> bool:
    """A Redis stream id (`<ms>` or `<ms>-<seq>`, each an unsigned 64-bit number), as a
    client may send it back in `Last-Event-ID`; Redis refuses anything else mid-stream."""
    match = _ENTRY_ID.match(text)
    return bool(match) and all(int(part or 0) <= _U64_MAX for part in match.groups())


def stream_key(generation_id) -> str:
    return f"tandem:gen:{generation_id}"


def tokens_event(tokens: list[int], text: str, n: int) -> TokensEvent:
    return {"type": "tokens", "tokens": list(tokens), "text": text, "n": n}


def done_event(finish_reason: str, prompt_tokens: int, completion_tokens: int) -> DoneEvent:
    return {
        "type": "done",
        "finish_reason": finish_reason,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }


def error_event(error: str) -> ErrorEvent:
    return {"type": "error", "error": error}


def requeued_event(reason: str) -> RequeuedEvent:
    return {"type": "requeued", "reason": reason}


_local = threading.local()


def redis_url() -> str:
    if not settings.REDIS_URL:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured("REDIS_URL is not set and no embedded Redis is running")
    return settings.REDIS_URL


def _client() -> redis.Redis:
    url = redis_url()
    client = getattr(_local, "client", None)
    if client is None or getattr(_local, "url", None) != url:
        client = redis.Redis.from_url(url)
        _local.client, _local.url = client, url
    return client


def _decode(fields: dict) -> dict[str, Any]:
    raw = fields.get(b"e", fields.get("e"))
    if isinstance(raw, bytes):
        raw = raw.decode()
    return json.loads(raw)


def _id(raw) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def publish(generation_id, event: Event | dict, *, client: redis.Redis | None = None) -> str:
    """Append one event; a terminal event also sets the stream's expiry. Returns its id."""
    client = client or _client()
    key = stream_key(generation_id)
    pipe = client.pipeline(transaction=False)
    pipe.xadd(key, {"e": json.dumps(event)}, maxlen=MAXLEN, approximate=True)
    if event.get("type") in TERMINAL_TYPES:
        pipe.expire(key, TTL_S)
    else:
        # A stream whose worker vanished must not live forever either.
        pipe.expire(key, TTL_S * 6)
    entry_id = pipe.execute()[0]
    return _id(entry_id)


def publish_many(items: list[tuple[Any, dict]], *, client: redis.Redis | None = None) -> None:
    """Append events for many generations in one round trip (used by a verifier's round)."""
    if not items:
        return
    client = client or _client()
    pipe = client.pipeline(transaction=False)
    for generation_id, event in items:
        key = stream_key(generation_id)
        pipe.xadd(key, {"e": json.dumps(event)}, maxlen=MAXLEN, approximate=True)
        pipe.expire(key, TTL_S if event.get("type") in TERMINAL_TYPES else TTL_S * 6)
    pipe.execute()


def read_all(generation_id, *, last_id: str = "0") -> list[tuple[str, dict]]:
    """Every event after `last_id`, oldest first (sync)."""
    entries = _client().xrange(
        stream_key(generation_id), min=f"({last_id}" if last_id not in ("0", "-") else "-"
    )
    return [(_id(entry_id), _decode(fields)) for entry_id, fields in entries]


async def follow(
    generation_id, *, last_id: str = "0", block_ms: int = 5000, timeout_s: float | None = None
) -> AsyncIterator[tuple[str, dict]]:
    """Yield (id, event) from `last_id` on; ends after a done or error event.

    With `timeout_s`, gives up (returns) after that many seconds without any event, so a
    caller never waits forever on a stream nobody writes to.
    """
    import time

    client = aioredis.Redis.from_url(redis_url())
    key = stream_key(generation_id)
    cursor = last_id or "0"
    quiet_since = time.monotonic()
    try:
        while True:
            reply = await client.xread({key: cursor}, count=100, block=block_ms)
            if not reply:
                if timeout_s is not None and time.monotonic() - quiet_since > timeout_s:
                    return
                continue
            quiet_since = time.monotonic()
            for _key, entries in reply:
                for entry_id, fields in entries:
                    cursor = _id(entry_id)
                    event = _decode(fields)
                    yield cursor, event
                    if event.get("type") in TERMINAL_TYPES:
                        return
    finally:
        await client.aclose()


def collect_text(events: list[tuple[str, dict]]) -> str:
    """The text of a stream's token events, concatenated (a helper for tests and benches)."""
    return "".join(e.get("text", "") for _id_, e in events if e.get("type") == "tokens")
