"""What the web process and the node processes share, torch-free and database-free: the Redis
keys, the shapes of the messages that cross between them, and the helpers that write and read
them. Every client comes from `fleet.redis_clients` (one per thread, one per event loop).

Three things cross:

- **Token streams**: one Redis stream per generation, `tandem:gen:<uuid>`. Workers
  `publish()` events (sync); the web side follows them (`inference.serving.sse.follow`,
  async) or reads them at once with `read_all()`.
- **Messages to node workers** (`send`, `receive`): control messages through Celery, round
  messages through a Redis list per node.
- **Warm-up state** (`warmup_publish`, `warmup_status`): what a pipeline waits for before
  it can serve, and node inspection (`inspect_key`).

Stream events are JSON objects:

    {"type": "tokens", "tokens": [..], "text": "..", "n": <total so far>}
        + "logprobs": [[lp, [[id, lp], ..]], ..] per token, when the generation asked for them
        + "prompt_logprobs": [null, [lp, [[id, lp], ..]], ..] per prompt token, when asked
          (on the first event of an attempt: this tokens event, or the done event of a
          max_tokens 0 request; shapes in inference/engine/logprobs.py)
    {"type": "done", "finish_reason": "..", "usage": {"prompt_tokens": .., "completion_tokens": ..}}
    {"type": "error", "error": ".."}
    {"type": "requeued", "reason": ".."}   # after a re-route; tokens are NOT resent

A stream is trimmed approximately to MAXLEN entries and expires TTL_S after its terminal
event; following it ends after a done or error event.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

import redis

from fleet import redis_clients

MAXLEN = 10_000
TTL_S = 3600
TERMINAL_TYPES = frozenset({"done", "error"})


class TokensEvent(TypedDict):
    type: Literal["tokens"]
    tokens: list[int]
    text: str
    n: int
    logprobs: NotRequired[list]
    prompt_logprobs: NotRequired[list]


class DoneEvent(TypedDict):
    type: Literal["done"]
    finish_reason: str
    usage: dict[str, int]
    prompt_logprobs: NotRequired[list]


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
    return match is not None and all(int(part or 0) <= _U64_MAX for part in match.groups())


def stream_key(generation_id) -> str:
    return f"tandem:gen:{generation_id}"


def tokens_event(tokens: list[int], text: str, n: int) -> TokensEvent:
    return {"type": "tokens", "tokens": list(tokens), "text": text, "n": n}


def with_logprobs(
    event: TokensEvent | DoneEvent, *, logprobs: list | None = None, prompt: list | None = None
) -> TokensEvent | DoneEvent:
    """The event with the logprobs a generation asked for (none: unchanged)."""
    if logprobs is not None and event["type"] == "tokens":
        event["logprobs"] = logprobs
    if prompt is not None:
        event["prompt_logprobs"] = prompt
    return event


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


def decode_event(fields: Any) -> dict[str, Any]:
    """The event of a stream entry's fields (redis-py gives bytes keys and values)."""
    raw = fields.get(b"e", fields.get("e"))
    if isinstance(raw, bytes):
        raw = raw.decode()
    return json.loads(raw)


def decode_id(raw) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def publish(generation_id, event: Event | dict, *, client: redis.Redis | None = None) -> str:
    """Append one event; a terminal event also sets the stream's expiry. Returns its id."""
    client = client or redis_clients.client()
    key = stream_key(generation_id)
    pipe = client.pipeline(transaction=False)
    pipe.xadd(key, {"e": json.dumps(event)}, maxlen=MAXLEN, approximate=True)
    if event.get("type") in TERMINAL_TYPES:
        pipe.expire(key, TTL_S)
    else:
        # A stream whose worker vanished must not live forever either.
        pipe.expire(key, TTL_S * 6)
    entry_id = pipe.execute()[0]
    return decode_id(entry_id)


def publish_many(items: list[tuple[Any, dict]], *, client: redis.Redis | None = None) -> None:
    """Append events for many generations in one round trip (used by a verifier's round)."""
    if not items:
        return
    client = client or redis_clients.client()
    pipe = client.pipeline(transaction=False)
    for generation_id, event in items:
        key = stream_key(generation_id)
        pipe.xadd(key, {"e": json.dumps(event)}, maxlen=MAXLEN, approximate=True)
        pipe.expire(key, TTL_S if event.get("type") in TERMINAL_TYPES else TTL_S * 6)
    pipe.execute()


def read_all(generation_id, *, last_id: str = "0") -> list[tuple[str, dict]]:
    """Every event after `last_id`, oldest first (sync)."""
    entries: Any = redis_clients.client().xrange(
        stream_key(generation_id), min=f"({last_id}" if last_id not in ("0", "-") else "-"
    )
    return [(decode_id(entry_id), decode_event(fields)) for entry_id, fields in entries]


def collect_text(events: list[tuple[str, dict]]) -> str:
    """The text of a stream's token events, concatenated (a helper for tests and benches)."""
    return "".join(e.get("text", "") for _id_, e in events if e.get("type") == "tokens")


# -- messages to node workers ----------------------------------------------------------------
# Cancels go through the broker: one Celery task, `tandem.node.message`, on the node's own
# queue `node.<id>`.
#
# Configuration messages (to either role) go on the node's Redis list below, like round
# messages, so that one change reaches a whole pipeline in ONE pipelined round trip
# (`send_many`: 2,500 nodes in tens of ms, where a Celery publish per node took 1.5 s), and
# successive configurations reach a node in order (one FIFO list). Both channels end in the same
# engine-loop inbox. As with the broker's queue before, a configuration sent while a node is
# down waits on its list (ROUND_TTL_S) and is applied when it starts, after its boot placement's
# (the same configuration or an older one than the database's; `discard_rounds` drops it when
# the node is declared dead).
#
# Messages on the hot path of every request or round -- start and claimed (the ledger's answer
# to a claim; to a verifier), drafts (to a verifier), draft_start and results (to a drafter) --
# skip Celery: one RPUSH onto the node's
# Redis list `tandem:node:<id>:rounds`, read with BLPOP by the node's listener thread straight
# into its engine loop's inbox (publishing a Celery task costs the web process milliseconds of
# CPU per request). Reordering between the two channels is safe: a start precedes its round
# messages (the verifier sends draft_start after prefilling it), a cancel that overtakes its
# start leaves a tombstone that drops the start, a re-route's start that overtakes the cancel
# of the old attempt replaces the old attempt (both roles), and attempt tombstones drop round
# messages of ended attempts. Payloads are JSON and name generations by id.

TASK = "tandem.node.message"
ROUND_KINDS = frozenset({"start", "drafts", "draft_start", "results", "claimed"})
# sent on the node's Redis list, not through Celery; `drafter_lost` (to a verifier: finish that
# drafter's sequences by plain decoding) comes after the starts it concerns, on the same list
LIST_KINDS = ROUND_KINDS | {"config", "drafter_lost"}
ROUND_TTL_S = 3600  # an idle node's list does not live forever


def node_queue(node_id: int) -> str:
    return f"node.{node_id}"


def round_key(node_id: int) -> str:
    return f"tandem:node:{node_id}:rounds"


def inspect_key(node_id: int) -> str:
    """What a node worker last said it holds (KV slots, sequence ids), written at each change."""
    return f"tandem:node:{node_id}:inspect"


def send(node_id: int, kind: str, payload: dict[str, Any]) -> None:
    if kind in LIST_KINDS:
        send_many([node_id], kind, payload)
        return
    from fleet.celery import app

    app.send_task(TASK, args=[kind, payload], queue=node_queue(node_id), ignore_result=True)


def send_many(node_ids, kind: str, payload: dict[str, Any]) -> None:
    """The same list message to many nodes, encoded once, in one pipelined round trip."""
    if kind not in LIST_KINDS:
        raise ValueError(f"{kind!r} is not sent on the nodes' lists")
    ids = list(node_ids)
    if not ids:
        return
    raw = json.dumps([kind, payload])
    pipe = redis_clients.client().pipeline(transaction=False)
    for node_id in ids:
        key = round_key(node_id)
        pipe.rpush(key, raw)
        pipe.expire(key, ROUND_TTL_S)
    pipe.execute()


def discard_rounds(node_id: int) -> None:
    """Drop a dead worker's pending round messages: they belong to attempts that end with
    it, and its restarted process has no tombstones to recognise them by."""
    redis_clients.client().delete(round_key(node_id))


def receive(node_id: int, timeout_s: float = 1.0) -> list[tuple[str, dict]]:
    """Round messages for a node, oldest first: blocks up to timeout_s for the first, then
    takes whatever else is already there."""
    client, key = redis_clients.client(), round_key(node_id)
    first = client.blpop([key], timeout=timeout_s)
    if first is None:
        return []
    raws = [first[1]]
    pipe = client.pipeline(transaction=True)  # atomic: a push in between is kept
    pipe.lrange(key, 0, 255)
    pipe.ltrim(key, 256, -1)
    raws += pipe.execute()[0]
    return [tuple(json.loads(r)) for r in raws]


# -- warm-up: what a pipeline waits for before it can serve ----------------------------------
# "training the demo pair, 42%", "converting the SmolLM2 weights". Written by the process
# preparing the models (worker/local.py, `manage.py train_demo_pair`), read by the web (a 503
# with Retry-After instead of a hang or a confusing 400) and by the console. Kept in Redis, not
# the database: it is transient, written up to once a second, and must vanish by itself (a TTL)
# if the process preparing the models dies.

WARMUP_KEY = "tandem:warmup:{name}"
WARMUP_TTL_S = 120  # a status not refreshed for this long is stale: its writer died
MIN_RETRY_AFTER_S, MAX_RETRY_AFTER_S = 5, 120


@dataclass(frozen=True)
class Warmup:
    pipeline: str
    waiting_for: str  # "training the demo model pair", "converting the SmolLM2 weights"
    progress: float | None  # 0..1 when known
    eta_s: float | None  # seconds left, when it can be estimated

    @property
    def percent(self) -> int | None:
        return None if self.progress is None else int(self.progress * 100)

    @property
    def retry_after_s(self) -> int:
        eta = self.eta_s if self.eta_s is not None else MIN_RETRY_AFTER_S
        return int(min(max(eta, MIN_RETRY_AFTER_S), MAX_RETRY_AFTER_S))

    def describe(self) -> str:
        text = self.waiting_for
        if self.percent is not None:
            text += f" ({self.percent}% done"
            text += f", about {self.eta_s:.0f} s left)" if self.eta_s is not None else ")"
        return text


def warmup_publish(
    *,
    pipeline: str,
    waiting_for: str,
    progress: float | None = None,
    eta_s: float | None = None,
    ttl_s: int = WARMUP_TTL_S,
) -> None:
    value = {"waiting_for": waiting_for, "progress": progress, "eta_s": eta_s}
    redis_clients.client().set(WARMUP_KEY.format(name=pipeline), json.dumps(value), ex=ttl_s)


def warmup_clear(*, pipeline: str) -> None:
    redis_clients.client().delete(WARMUP_KEY.format(name=pipeline))


def warmup_status(pipeline: str) -> Warmup | None:
    """The pipeline's warm-up, or None when nothing is being prepared for it."""
    raw = redis_clients.client().get(WARMUP_KEY.format(name=pipeline))
    if raw is None:
        return None
    value = json.loads(raw)
    return Warmup(pipeline, value["waiting_for"], value.get("progress"), value.get("eta_s"))


def warmup_statuses(pipelines: list[str]) -> dict[str, Warmup]:
    """Warm-ups of several pipelines in one round trip (the console's lists)."""
    if not pipelines:
        return {}
    raws = redis_clients.client().mget([WARMUP_KEY.format(name=n) for n in pipelines])
    out = {}
    for name, raw in zip(pipelines, raws, strict=True):
        if raw is not None:
            v = json.loads(raw)
            out[name] = Warmup(name, v["waiting_for"], v.get("progress"), v.get("eta_s"))
    return out


class WarmupReporter:
    """Publishes a long job's progress at most once a second, with an estimate of the time
    left from the rate so far."""

    def __init__(self, *, pipeline: str, waiting_for: str, every_s: float = 1.0):
        self.pipeline, self.waiting_for, self.every_s = pipeline, waiting_for, every_s
        self.started = time.monotonic()
        self._last = 0.0

    def report(self, progress: float | None = None, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.every_s:
            return
        self._last = now
        eta = None
        if progress is not None and progress > 0.01:
            eta = (now - self.started) * (1 - progress) / progress
        try:
            warmup_publish(
                pipeline=self.pipeline, waiting_for=self.waiting_for, progress=progress, eta_s=eta
            )
        except redis.RedisError:
            pass  # progress is for people watching; the job itself goes on
