"""What the web process and the node processes share, torch-free and database-free: the Redis
keys, the shapes of the messages that cross between them, and the helpers that write and read
them. Every client comes from `fleet.redis_clients` (one per thread, one per event loop).

Three things cross:

- **Token streams**: one Redis stream per generation, under the verifier that owns it:
  `tandem:node:<verifier>:gen:<uuid>`. Workers `publish()` events (sync); the web side
  follows them (`inference.serving.sse.follow`, async) or reads them at once with
  `read_all()`, always under the verifier the Generation row names.
- **Messages to node workers** (`send`, `send_from`, `receive`): cancels through Celery
  (signed), everything else through Redis lists.
- **Node inspection** (`inspect_key`). (What a pipeline waits for before it can serve, the
  warm-up state, is `inference.warmup`'s.)

Stream events are JSON objects:

    {"type": "tokens", "tokens": [..], "text": "..", "n": <total so far>}
        + "logprobs": [[lp, [[id, lp], ..]], ..] per token, when the generation asked for them
        + "prompt_logprobs": [null, [lp, [[id, lp], ..]], ..] per prompt token, when asked
          (on the first event of an attempt: this tokens event, or the done event of a
          max_tokens 0 request; shapes in inference/engine/logprobs.py)
    {"type": "done", "finish_reason": "..", "usage": {"prompt_tokens": .., "completion_tokens": ..}}
        + "spec": {"num_drafts", "num_draft_tokens", "num_accepted_tokens",
          "num_accepted_tokens_per_pos", "num_draft_tokens_per_pos"}: the finished attempt's
          speculative-decoding counters (SPEC_FIELDS), from the verifier
    {"type": "error", "error": ".."}
    {"type": "requeued", "reason": ".."}   # after a re-route; tokens are NOT resent

A stream is trimmed approximately to MAXLEN entries and expires TTL_S after its terminal
event; following it ends after a done or error event. A re-route moves it (`move_stream`): the
control plane copies it, ids kept, under the new verifier, with a `requeued` event naming the
new owner at the end of both; a follower switches once the ledger agrees (`sse`).

**A node acts only as itself** (Kubernetes' Node authorizer + NodeRestriction). Every key a
node may touch carries its id, and each node has its own Redis ACL user
(`fleet.nodes.redis_acl`, built from `fleet.nodes.redis_keys`, where the node keys are named;
the web tier and control processes keep the admin user):

- `tandem:node:<id>:*` is the node's own: its streams (only it and the control plane write
  them, so what a client reads under the ledger's owner is that owner's word), its inspection
  key, its control inbox `tandem:node:<id>:rounds` (start, claimed, config: written by the
  control plane) and its outboxes. A node gets no stream-read command at all (no XRANGE,
  XREAD): the shared `tandem:ledger` and telemetry streams it appends to carry other nodes'
  outputs, and Redis 6 key patterns do not tell reads from writes.
- Node-to-node round messages (drafts, draft_start, results, a verifier's cancel of a draft)
  go to the SENDER's outbox `tandem:node:<sender>:to:<receiver>`; a node may read only
  `tandem:node:*:to:<itself>`. So the key a message came from names its sender: `receive`
  stamps it on the payload (`drafter` / `verifier`), drops control kinds from peers, and a
  node listens only to the peers the control plane named (its pipeline's nodes) and the
  drafters named in its starts. A forged sender is impossible; what a peer's drafts can do is
  bounded by verification (rejection sampling keeps the output the target's).
- Cancels ride Celery (`node.<id>`), whose kombu transport needs shared keys: they carry an
  HMAC of the control plane over (node, kind, payload) with the node's control key
  (`fleet.nodes.signing.control_key`); the node drops any other.
- Reports (`tandem:ledger`) and telemetry are signed and checked against the ledger's
  assignment (`inference.node_reports`, `inference.ledger`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any, Literal, NotRequired, TypedDict

import redis

from fleet import redis_clients
from fleet.nodes.redis_keys import node_prefix, node_queue

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
    spec: NotRequired[dict[str, Any]]


# The per-generation speculative-decoding counters a done event carries (vLLM's names).
SPEC_FIELDS = (
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "num_accepted_tokens_per_pos",
    "num_draft_tokens_per_pos",
)


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


def stream_key(node_id: int, generation_id) -> str:
    """The token stream of a generation, under the verifier that owns it."""
    return f"{node_prefix(node_id)}gen:{generation_id}"


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


def done_event(
    finish_reason: str, prompt_tokens: int, completion_tokens: int, *, spec=None
) -> DoneEvent:
    """`spec`: the generation's counters (any object with SPEC_FIELDS as attributes)."""
    event: DoneEvent = {
        "type": "done",
        "finish_reason": finish_reason,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }
    if spec is not None:
        event["spec"] = {name: getattr(spec, name) for name in SPEC_FIELDS}
    return event


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


def publish(
    generation_id, event: Event | dict, *, node: int | None, client: redis.Redis | None = None
) -> str:
    """Append one event to the stream of verifier `node`; a terminal event also sets the
    stream's expiry. Returns its id."""
    if node is None:
        raise ValueError(f"generation {generation_id} has no verifier: its stream has no owner")
    client = client or redis_clients.client()
    key = stream_key(node, generation_id)
    pipe = client.pipeline(transaction=False)
    pipe.xadd(key, {"e": json.dumps(event)}, maxlen=MAXLEN, approximate=True)
    if event.get("type") in TERMINAL_TYPES:
        pipe.expire(key, TTL_S)
    else:
        # A stream whose worker vanished must not live forever either.
        pipe.expire(key, TTL_S * 6)
    entry_id = pipe.execute()[0]
    return decode_id(entry_id)


def publish_many(
    items: list[tuple[Any, Any]], *, node: int, client: redis.Redis | None = None
) -> None:
    """Append events for many generations of verifier `node` in one round trip (a round)."""
    if not items:
        return
    client = client or redis_clients.client()
    pipe = client.pipeline(transaction=False)
    for generation_id, event in items:
        key = stream_key(node, generation_id)
        pipe.xadd(key, {"e": json.dumps(event)}, maxlen=MAXLEN, approximate=True)
        pipe.expire(key, TTL_S if event.get("type") in TERMINAL_TYPES else TTL_S * 6)
    pipe.execute()


def read_all(generation_id, *, node: int | None, last_id: str = "0") -> list[tuple[str, dict]]:
    """Every event after `last_id` of the stream under verifier `node` (the one the ledger
    names; None: no stream), oldest first (sync; the control plane's and web's)."""
    if node is None:
        return []
    entries: Any = redis_clients.client().xrange(
        stream_key(node, generation_id), min=f"({last_id}" if last_id not in ("0", "-") else "-"
    )
    return [(decode_id(entry_id), decode_event(fields)) for entry_id, fields in entries]


def move_stream(generation_id, *, old: int | None, new: int, reason: str) -> list[tuple[str, dict]]:
    """A re-route (control plane only): end the old owner's stream with a `requeued` event
    naming the new owner, and copy it, ids kept, under the new owner (whose earlier copy, from
    an older attempt, is replaced). Returns the events copied (the resume state)."""
    client = redis_clients.client()
    event = {**requeued_event(reason), "owner": int(new)}
    if old is not None and int(old) != int(new):
        publish(generation_id, event, node=old, client=client)
    events = read_all(generation_id, node=old) if old is not None else []
    if old is None or int(old) == int(new):
        publish(generation_id, event, node=new, client=client)
        return events
    key = stream_key(new, generation_id)
    pipe = client.pipeline(transaction=True)
    pipe.delete(key)
    for entry_id, e in events:
        pipe.xadd(key, {"e": json.dumps(e)}, id=entry_id)
    pipe.expire(key, TTL_S * 6)
    pipe.execute()
    return events


def collect_text(events: list[tuple[Any, dict]]) -> str:
    """The text of a stream's token events, concatenated (a helper for tests and benches)."""
    return "".join(e.get("text", "") for _id_, e in events if e.get("type") == "tokens")


# -- messages to node workers ----------------------------------------------------------------
# Cancels from the control plane go through the broker: one Celery task, `tandem.node.message`,
# on the node's own queue `node.<id>`, signed (see the module doc).
#
# Configuration messages, starts and claims go on the node's control inbox (a Redis list), so
# that one change reaches a whole pipeline in ONE pipelined round trip (`send_many`: 2,500 nodes
# in tens of ms, where a Celery publish per node took 1.5 s), and successive configurations
# reach a node in order (one FIFO list). A configuration sent while a node is down waits on its
# list (ROUND_TTL_S); `discard_rounds` drops it when the node is declared dead.
#
# Round messages between nodes (drafts, draft_start, results) skip Celery: one RPUSH onto the
# sender's outbox for the receiver, read with BLPOP (with the control inbox) by the receiver's
# listener thread straight into its engine loop's inbox. Reordering between the channels is
# safe: a start precedes its round messages (the verifier sends draft_start after prefilling
# it), a cancel that overtakes its start leaves a tombstone that drops the start, a re-route's
# start that overtakes the cancel of the old attempt replaces the old attempt (both roles), and
# attempt tombstones drop round messages of ended attempts. Payloads are JSON and name
# generations by id.

TASK = "tandem.node.message"
ROUND_KINDS = frozenset({"start", "drafts", "draft_start", "results", "claimed"})
# sent on the node's control list, not through Celery; `drafter_lost` (to a verifier: finish that
# drafter's sequences by plain decoding) comes after the starts it concerns, on the same list
LIST_KINDS = ROUND_KINDS | {"config", "drafter_lost"}
# What a node may send another node (to its outbox, see the module doc), and the payload field
# `receive` sets to the sender's id, whatever the sender wrote there.
PEER_KINDS = {"drafts": "drafter", "draft_start": "verifier", "results": "verifier"}
PEER_CANCEL_FIELD = "verifier"  # a verifier's cancel of a sequence its drafter drafts
ROUND_TTL_S = 3600  # an idle node's list does not live forever
_CONTROL_CONTEXT = b"tandem/node-control/v1\0"


def round_key(node_id: int) -> str:
    """The node's control inbox: start, claimed, config (the control plane's only)."""
    return f"{node_prefix(node_id)}rounds"


def peer_key(sender: int, receiver: int) -> str:
    """Round messages of node `sender` to node `receiver`: the sender's outbox."""
    return f"{node_prefix(sender)}to:{int(receiver)}"


def inspect_key(node_id: int) -> str:
    """What a node worker last said it holds (KV slots, sequence ids), written at each change."""
    return f"{node_prefix(node_id)}inspect"


def control_signature(key: str, node_id: int, kind: str, payload: dict[str, Any]) -> str:
    """The control plane's MAC of a Celery message to node `node_id` (see the module doc)."""
    body = json.dumps({k: v for k, v in payload.items() if k != "sig"}, sort_keys=True)
    message = _CONTROL_CONTEXT + f"{int(node_id)}\0{kind}\0".encode() + body.encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def control_signed(key: str, node_id: int, kind: str, payload: dict[str, Any]) -> bool:
    sig = payload.get("sig")
    return isinstance(sig, str) and hmac.compare_digest(
        sig, control_signature(key, node_id, kind, payload)
    )


def send(node_id: int, kind: str, payload: dict[str, Any]) -> None:
    """A control-plane message to a node (never sent by a node: see `send_from`)."""
    if kind in LIST_KINDS:
        send_many([node_id], kind, payload)
        return
    from fleet.celery import app
    from fleet.nodes.signing import control_key

    signed = {**payload, "sig": control_signature(control_key(node_id), node_id, kind, payload)}
    app.send_task(TASK, args=[kind, signed], queue=node_queue(node_id), ignore_result=True)


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


def send_from(sender: int, receiver: int, kind: str, payload: dict[str, Any]) -> None:
    """A round message of node `sender` to node `receiver`, on the sender's outbox."""
    if kind not in PEER_KINDS and kind != "cancel":
        raise ValueError(f"a node does not send {kind!r} to another node")
    key = peer_key(sender, receiver)
    pipe = redis_clients.client().pipeline(transaction=False)
    pipe.rpush(key, json.dumps([kind, payload]))
    pipe.expire(key, ROUND_TTL_S)
    pipe.execute()


def discard_rounds(node_id: int) -> None:
    """Drop a dead worker's pending round messages: they belong to attempts that end with
    it, and its restarted process has no tombstones to recognise them by."""
    client = redis_clients.client()
    keys = [round_key(node_id), *client.scan_iter(match=f"tandem:node:*:to:{int(node_id)}")]
    client.delete(*keys)


def _stamped(sender: int | None, kind: str, payload: dict) -> tuple[str, dict] | None:
    """A message as its receiver acts on it: from the control inbox as it is; from a peer's
    outbox only a peer kind, with the sender's id in the field that names it."""
    if sender is None:
        return kind, payload
    field = PEER_KINDS.get(kind) or (PEER_CANCEL_FIELD if kind == "cancel" else None)
    if field is None or not isinstance(payload, dict):
        return None
    return kind, {**payload, field: sender}


def receive(node_id: int, timeout_s: float = 1.0, *, peers=()) -> list[tuple[str, dict]]:
    """Round messages for a node, control inbox first, then its peers' outboxes: blocks up
    to timeout_s for the first, then takes whatever else is already there."""
    client = redis_clients.client()
    senders: dict[str, int | None] = {round_key(node_id): None}
    senders.update({peer_key(p, node_id): int(p) for p in peers if int(p) != int(node_id)})
    keys = list(senders)
    first: Any = client.blpop(keys, timeout=timeout_s)
    if first is None:
        return []
    raws: list[tuple[int | None, Any]] = [(senders[decode_id(first[0])], first[1])]
    pipe = client.pipeline(transaction=True)  # atomic: a push in between is kept
    for key in keys:
        pipe.lrange(key, 0, 255)
        pipe.ltrim(key, 256, -1)
    replies = pipe.execute()
    for key, got in zip(keys, replies[::2], strict=True):
        raws += [(senders[key], r) for r in got]
    out = []
    for sender, raw in raws:
        try:
            kind, payload = json.loads(raw)
        except (ValueError, TypeError):
            continue
        if (message := _stamped(sender, kind, payload)) is not None:
            out.append(message)
    return out
