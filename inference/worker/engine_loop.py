"""The engine host of one node worker process: the engine loop thread, its inbox, a
reporter thread that sends the loop's reports (claims, first tokens, finishes) to the
control plane's ledger as signed stream entries (`inference.node_reports`; a node holds no
database credentials), and inspection state in Redis.

The Celery task `tandem.node.message` (solo pool, main thread) only drops control messages
into the inbox (those the control plane signed for this node: `accept_control`), and a
listener thread drops round messages from the node's control inbox and its peers' outboxes
there (`inference.wire.receive`, which names each peer message's real sender); the loop
(DraftLoop or VerifyLoop) owns the engine and runs rounds in its own thread,
so a forward pass never blocks the consumer and the consumer never blocks a round.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import OrderedDict
from typing import Any

import redis

from fleet import redis_clients
from fleet.logs import Throttled
from inference import node_reports, wire
from inference.worker.live_figures import LoopStats

logger = logging.getLogger(__name__)

_current: BaseLoop | None = None


def current() -> BaseLoop | None:
    return _current


def install(loop: BaseLoop) -> None:
    global _current
    _current = loop


FINAL = float("inf")


class Tombstones:
    """Recently ended generations (bounded): gen id -> the last attempt that ended here
    (FINAL after a cancel). A late start or draft of an ended attempt is dropped; a later
    attempt (a re-route back to this node) is not."""

    def __init__(self, size: int = 4096):
        self.ids: OrderedDict[str, float] = OrderedDict()
        self.size = size

    def add(self, gid: str, attempt: float = FINAL) -> None:
        self.ids[gid] = max(attempt, self.ids.get(gid, 0))
        self.ids.move_to_end(gid)
        while len(self.ids) > self.size:
            self.ids.popitem(last=False)

    def blocks(self, gid: str, attempt: float) -> bool:
        return gid in self.ids and self.ids[gid] >= attempt


class BaseLoop:
    role = ""

    def __init__(
        self,
        *,
        node_id: int,
        pipeline_id: int,
        config: dict,
        key: str = "",
        control_key: str = "",
        peers=(),
    ):
        self.node_id = node_id
        self.pipeline_id: int | None = pipeline_id  # a pushed config may name none
        self.key = key  # this node's signing key (from the control plane, see boot.py)
        self.control_key = control_key  # checks the control plane's Celery messages
        # Nodes whose outboxes to this one are read: the pipeline's (session, config pushes)
        # and the drafters its starts name. Never shrinks: in-flight sequences finish where
        # they are after a node moves.
        self.peers: set[int] = {int(p) for p in peers}
        self.config = dict(config)
        self.inbox: queue.Queue[tuple[str, dict]] = queue.Queue()
        self.stats = LoopStats()
        self.tombstones = Tombstones()
        self.stopping = threading.Event()
        self.prepared = threading.Event()  # set once `prepare` ran (its first round is next)
        self.quiet = Throttled(logger, every_s=30.0)  # Redis away: one line, then a summary
        self._writes: queue.Queue = queue.Queue()
        self._inspect_dirty = True
        self._inspect_at = 0.0
        self._threads: list[threading.Thread] = []

    # -- life cycle --------------------------------------------------------------------------
    def start(self) -> None:
        threads = (("engine", self._run), ("report", self._report), ("listen", self._listen))
        for name, target in threads:
            t = threading.Thread(target=target, name=f"{self.role}-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the threads and wait for them (bounded), so that nothing of this loop still
        touches Redis once stop() returns."""
        self.stopping.set()
        self._writes.put(None)
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout_s)

    def deliver(self, kind: str, payload: dict) -> None:
        self.inbox.put((kind, payload))

    def accept_control(self, kind: str, payload: dict) -> bool:
        """A Celery message (a cancel) goes in only when the control plane signed it for
        this node: another node may reach this queue through the broker's shared keys."""
        if not isinstance(payload, dict) or not wire.control_signed(
            self.control_key, self.node_id, kind, payload
        ):
            self.stats.errors += 1
            logger.warning("node %s: unsigned %r message dropped", self.node_id, kind)
            return False
        self.deliver(kind, {k: v for k, v in payload.items() if k != "sig"})
        return True

    def _listen(self) -> None:
        """Hot-path messages (start, drafts, draft_start, results) from this node's control
        inbox and its peers' outboxes."""
        while not self.stopping.is_set():
            try:
                for kind, payload in wire.receive(self.node_id, timeout_s=1.0, peers=self.peers):
                    if kind == "start" and isinstance(payload.get("drafter"), int):
                        self.peers.add(payload["drafter"])  # the control plane's word
                    elif kind == "config":
                        self.peers.update(int(p) for p in payload.get("peers") or ())
                    self.inbox.put((kind, payload))
                self.quiet.clear("node %s: Redis reachable again", self.node_id)
            except Exception as exc:  # Redis away for a moment: retry, never die
                self.quiet.error("node %s: reading round messages failed: %r", self.node_id, exc)
                time.sleep(0.5)

    def prepare(self) -> None:
        """Before the first round, in the loop's thread (e.g. the start-up cost sweep)."""

    def _run(self) -> None:
        try:
            self.prepare()
        except Exception:
            logger.exception("%s loop of node %s: prepare failed", self.role, self.node_id)
        self.prepared.set()
        while not self.stopping.is_set():
            try:
                self.step()
            except Exception:  # a bad message must not kill the node: log and go on
                self.stats.errors += 1
                logger.exception("%s loop of node %s: step failed", self.role, self.node_id)
            self.stats.tick()
            now = time.monotonic()
            if self._inspect_dirty or now - self._inspect_at > 1.0:  # figures at most ~1 s old
                self._inspect_dirty, self._inspect_at = False, now
                self._write_inspect()

    def _drain(self, timeout: float) -> list[tuple[str, dict]]:
        items = []
        try:
            items.append(
                self.inbox.get(timeout=max(timeout, 0.0))
                if timeout > 0
                else self.inbox.get_nowait()
            )
        except queue.Empty:
            return items
        while True:
            try:
                items.append(self.inbox.get_nowait())
            except queue.Empty:
                return items

    # -- config ---------------------------------------------------------------------------------
    def apply_pipeline_config(self, payload: dict) -> None:
        """A new pipeline configuration, applied between rounds (k policy, batch caps)."""
        if payload.get("pipeline") != self.pipeline_id:
            self.pipeline_id = payload.get("pipeline")
        self.config.update(payload.get("config") or {})
        logger.info("node %s: pipeline config v%s applied", self.node_id, payload.get("version"))

    # -- side effects -----------------------------------------------------------------------------
    def send(self, node_id: int, kind: str, payload: dict[str, Any]) -> None:
        """A round message to another node: on this node's outbox for it."""
        self.retrying(wire.send_from, self.node_id, node_id, kind, payload)

    def retrying(self, write, *args, give_up_s: float = 60.0, **kwargs) -> None:
        """A round's write to Redis (a message to the other node, the stream's events),
        retried while Redis is away (restarting under `up`: a second or a few), never dropped
        after one failure: a round message lost stalls every sequence of the pair."""
        deadline = time.monotonic() + give_up_s
        while True:
            try:
                write(*args, **kwargs)
                return
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if self.stopping.is_set() or time.monotonic() > deadline:
                    raise
                self.quiet.error("node %s: Redis write failed, retrying: %r", self.node_id, exc)
                time.sleep(0.2)

    def report(self, kind: str, **body: Any) -> None:
        """Queue a report for the ledger (never sent from inside a round)."""
        self._writes.put({"kind": kind, **body})

    def _report(self) -> None:
        """The reporter thread: every report queued meanwhile goes out signed, in order, in
        one pipelined round trip; a failed send is retried (Redis away for a moment)."""
        while True:
            item = self._writes.get()
            if item is None:
                return
            batch = [item]
            while True:
                try:
                    item = self._writes.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._writes.put(None)
                    break
                batch.append(item)
            reports = [i for i in batch if isinstance(i, dict)]
            for attempt in range(50):
                try:
                    self._send_reports(reports)
                    break
                except Exception as exc:
                    self.quiet.error(
                        "node %s: reports not sent (try %d): %r", self.node_id, attempt, exc
                    )
                    time.sleep(0.2)
            for i in batch:
                if callable(i):
                    i()

    def _send_reports(self, reports: list[dict]) -> None:
        if not reports:
            return
        pipe = redis_clients.client().pipeline(transaction=False)
        for r in reports:
            entry = node_reports.encode(self.node_id, r, key=self.key)
            pipe.xadd(
                node_reports.STREAM, entry, maxlen=node_reports.STREAM_MAXLEN, approximate=True
            )
        pipe.execute()

    def flush_writes(self, timeout: float = 10.0) -> None:
        """Wait until every report queued so far has been sent."""
        done = threading.Event()
        self._writes.put(done.set)
        done.wait(timeout)

    # -- inspection -------------------------------------------------------------------------------
    def slots(self) -> dict:
        raise NotImplementedError

    def inspect(self) -> dict:
        return {
            "node": self.node_id,
            "role": self.role,
            "pipeline": self.pipeline_id,
            **self.slots(),
            "stats": self.stats.snapshot(),
            "at": time.time(),
        }

    def _write_inspect(self) -> None:
        try:
            redis_clients.client().set(
                wire.inspect_key(self.node_id), json.dumps(self.inspect()), ex=3600
            )
        except Exception as exc:
            self.quiet.error("node %s: inspect write failed: %r", self.node_id, exc)

    def step(self) -> None:
        raise NotImplementedError
