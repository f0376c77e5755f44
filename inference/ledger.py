"""The ledger consumer (`manage.py run_ledger`, one leader per deployment): the only writer
of what node workers report about their generations. Node workers hold no database
credentials; they XADD signed reports to `tandem:ledger` (`inference.node_reports`), and
this process applies them to the Generation rows through `inference.report_services`.

- **In batches, in order**: up to `batch` entries per read, applied oldest first in ONE
  transaction (each in its own savepoint, so a bad entry is set aside, never stuck).
- **Bad data from a bad day**: an entry that can never be stored as sent (unreadable, a
  non-finite number, an over-long field, a finish that does not fit its request, a
  constraint or value the database refuses) goes to the dead-letter stream with the reason
  (`inference.dead_letters`; counted in `/metrics`, shown on the console) and the ledger
  moves on; a finish set aside fails its generation, saying why. A transient error (the
  database unavailable, a lock: OperationalError and the like) is retried: nothing of the
  batch is acknowledged.
- **Exactly once**: a Redis consumer group; entries are acknowledged only after their
  transaction committed. A consumer restarted mid-stream first re-reads its own pending
  entries (delivered, not acknowledged), and every report is idempotent by (generation,
  attempt) -- a claim, first token or finish applied twice changes nothing -- so a crash
  between commit and acknowledgement neither loses nor doubles anything.
- **Only for its own node**: an entry's signature must match a key of the node it names
  (derived from that node's active tokens, as the telemetry aggregator does); a forged or
  re-labelled entry is refused, counted (`tandem:ledger:stats`, field `refused`) and logged.
  A well-signed report touches only generations assigned to the signing node.

A claim is answered: the claimed starts (and the refused ones) go back to the verifier as a
`claimed` round message after commit; it prefilled them meanwhile, and streams the claimed.

It lives in `inference/` beside `services.py`, not in `inference/worker/`: it is control
plane (it writes the database), the data plane's half of what `fleet/telemetry/aggregator`
is to telemetry.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import redis as redis_lib
from django.db import DatabaseError, DataError, IntegrityError, transaction

from fleet import redis_clients
from fleet.nodes.models import NodeToken
from fleet.nodes.signing import signing_key
from fleet.redis_clients import REFRESH_LEADER_LOCK
from inference import (
    dead_letters,
    node_reports,
    otel_spans,
    report_checks,
    report_services,
    wire,
)
from inference.models import Generation, GenerationState

logger = logging.getLogger(__name__)

GROUP = "ledger"
CONSUMER = "ledger"  # one name: a restarted leader finds its predecessor's pending entries
LEADER_KEY = "tandem:ledger:leader"
LEADER_TTL_MS = 6000
STATS_KEY = "tandem:ledger:stats"
KEYS_TTL_S = 10.0


def stats(client: redis_lib.Redis | None = None) -> dict[str, int]:
    raw: Any = (client or redis_clients.client()).hgetall(STATS_KEY)
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}


class Keys:
    """Signing keys of each node's active tokens, reloaded every KEYS_TTL_S and at once for
    a node not seen yet (a node registered a moment ago)."""

    def __init__(self):
        self.keys: dict[int, list[str]] = {}
        self.loaded_at = -1e9

    def load(self) -> None:
        keys: dict[int, list[str]] = defaultdict(list)
        rows = NodeToken.objects.filter(revoked_at__isnull=True).values_list(
            "node_id", "token_hash"
        )
        for node_id, token_hash in rows:
            keys[node_id].append(signing_key(node_id, token_hash))
        self.keys, self.loaded_at = dict(keys), time.monotonic()

    def of(self, node_id: int) -> list[str]:
        stale = time.monotonic() - self.loaded_at > KEYS_TTL_S
        if stale or (node_id not in self.keys and time.monotonic() - self.loaded_at > 0.5):
            self.load()
        return self.keys.get(node_id, [])


class Ledger:
    def __init__(self, *, client: redis_lib.Redis | None = None, batch: int = 500):
        self.r = client or redis_clients.client()
        self.batch = batch
        self.keys = Keys()
        self.leader_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.backlog = True  # read our own pending entries first (a restart mid-stream)

    # -- the stream ----------------------------------------------------------------------------
    def ensure_group(self) -> None:
        try:  # from the stream's start: reports sent before the first consumer ran count
            self.r.xgroup_create(node_reports.STREAM, GROUP, id="0", mkstream=True)
        except redis_lib.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def step(self, *, block_ms: int = 1000) -> int:
        """Read one batch (our pending entries first), apply it, acknowledge it. Returns how
        many entries were handled."""
        start = "0" if self.backlog else ">"
        response: Any = self.r.xreadgroup(
            GROUP,
            CONSUMER,
            {node_reports.STREAM: start},
            count=self.batch,
            block=None if self.backlog else block_ms,
        )
        entries = [e for _stream, es in (response or []) for e in es]
        if self.backlog and not entries:
            self.backlog = False
            return 0
        if not entries:
            return 0
        replies = self.apply(entries)
        for node_id, answer in replies.items():  # after commit: the verifier streams them
            if answer["starts"] or answer["refused"]:
                wire.send(node_id, "claimed", answer)
        ids = [entry_id for entry_id, _ in entries]
        self.r.xack(node_reports.STREAM, GROUP, *ids)
        return len(entries)

    def apply(self, entries) -> dict[int, dict[str, list]]:
        """Apply entries in order, in one transaction; the answers to claims by node:
        {"starts": [[gen, attempt], ..] claimed, "refused": [..] not (ended or moved)}.
        Entries set aside go to the dead-letter stream after commit."""
        counts: dict[str, int] = defaultdict(int)
        replies: dict[int, dict[str, list]] = defaultdict(lambda: {"starts": [], "refused": []})
        letters: list[tuple[str, dict[str, str]]] = []
        with transaction.atomic():
            for entry_id, fields in entries:
                outcome = self._apply_one(entry_id, fields, replies, letters)
                counts[outcome] += 1
        if letters:
            dead_letters.put(self.r, letters)
            counts["dead_letters"] += len(letters)
        pipe = self.r.pipeline(transaction=False)
        for field, n in counts.items():
            pipe.hincrby(STATS_KEY, field, n)
        pipe.execute()
        return replies

    def _apply_one(self, entry_id, fields, replies, letters) -> str:
        def set_aside(reason: str, outcome: str = "bad_data") -> str:
            logger.warning("ledger: entry %s set aside (dead letter): %s", entry_id, reason)
            letters.append(dead_letters.letter(entry_id, fields, reason))
            return outcome

        try:
            node_id, body, signature = node_reports.decode(fields)
        except ValueError as exc:
            return set_aside(f"malformed entry: {exc}", "malformed")
        try:
            report = node_reports.verified(node_id, body, signature, self.keys.of(node_id))
        except report_checks.BadReport as exc:
            self._refuse_finish(node_id, body, str(exc))
            return set_aside(str(exc))
        if report is None:
            logger.warning(
                "ledger: entry %s refused: not signed by node %s's key", entry_id, node_id
            )
            return "refused"
        try:
            with transaction.atomic():
                _APPLY[report["kind"]](node_id, report, replies)
        except report_checks.BadReport as exc:
            self._refuse_finish(node_id, body, str(exc))
            return set_aside(str(exc))
        except (DataError, IntegrityError) as exc:  # this entry, whenever it is applied
            reason = f"the database refused it: {type(exc).__name__}: {exc}"
            self._refuse_finish(node_id, body, reason)
            return set_aside(reason)
        except DatabaseError:
            raise  # the database is away: the batch is retried, nothing acknowledged
        except Exception as exc:
            logger.exception("ledger: entry %s of node %s could not be applied", entry_id, node_id)
            return set_aside(f"could not be applied: {type(exc).__name__}: {exc}")
        return "applied"

    @staticmethod
    def _refuse_finish(node_id: int, body: str, reason: str) -> None:
        """A finish set aside fails its generation (when it is this node's running attempt),
        saying why, rather than leaving it running until its deadline."""
        try:  # leniently: only which generation it names (NaN elsewhere is fine here)
            report = json.loads(body)
            if not isinstance(report, dict) or report.get("kind") != "finish":
                return
            gen, attempt = str(uuid.UUID(str(report["gen"]))), int(report["attempt"])
        except (ValueError, KeyError, TypeError, OverflowError):
            return
        try:
            with transaction.atomic():
                report_services.generation_refuse_finish(
                    node_id=node_id,
                    generation_id=gen,
                    attempt=attempt,
                    error=f"the verifier's finish was refused by the ledger: {reason}",
                )
        except (DataError, IntegrityError, ValueError) as exc:
            logger.warning("ledger: could not fail generation %s: %s", gen, exc)

    # -- leadership and the loop ---------------------------------------------------------------
    def lead(self, stop: threading.Event) -> bool:
        said = False
        while not stop.is_set():  # take the lock, or keep it (a retry after an error)
            if self.r.eval(REFRESH_LEADER_LOCK, 1, LEADER_KEY, self.leader_id, LEADER_TTL_MS):
                return True
            if not said:
                logger.info("ledger: another consumer leads; standing by")
                said = True
            stop.wait(1.0)
        return False

    def run(self, stop: threading.Event) -> None:
        """Until `stop`: lead (or stand by), consume; survive Redis and database hiccups."""
        while not stop.is_set():
            try:
                if not self.lead(stop):
                    break
                self.ensure_group()
                self.backlog = True
                while not stop.is_set():
                    if not self.r.eval(
                        REFRESH_LEADER_LOCK, 1, LEADER_KEY, self.leader_id, LEADER_TTL_MS
                    ):
                        logger.warning("ledger: another consumer leads now; standing by")
                        break
                    self.step(block_ms=1000)
            except (redis_lib.RedisError, OSError) as exc:
                logger.warning("ledger: redis error %s; retrying in 1s", exc)
                stop.wait(1.0)
            except DatabaseError as exc:
                logger.warning("ledger: database error %s; retrying in 1s", exc)
                from django.db import close_old_connections

                close_old_connections()
                stop.wait(1.0)
        try:
            if self.r.get(LEADER_KEY) == self.leader_id.encode():
                self.r.delete(LEADER_KEY)
        except (redis_lib.RedisError, OSError):
            pass
        otel_spans.flush()


def _claim(node_id: int, report: dict, replies) -> None:
    starts = [(str(g), int(a)) for g, a in report["starts"]]
    claimed = report_services.generations_claim(node_id=node_id, starts=starts)
    answer = replies[node_id]
    for g, a in starts:
        answer["starts" if (g, a) in claimed else "refused"].append([g, a])


def _first_token(node_id: int, report: dict, replies) -> None:
    at = datetime.fromtimestamp(float(report["at"]), tz=UTC)
    report_services.generations_first_token(
        node_id=node_id, ids=[str(g) for g in report["ids"]], at=at
    )


def _finish(node_id: int, report: dict, replies) -> None:
    params = (
        Generation.objects.filter(
            pk=str(report["gen"]),
            state=GenerationState.RUNNING,
            attempts=int(report["attempt"]),
            verifier_id=node_id,
        )
        .values_list("params", flat=True)
        .first()
    )
    if params is None:  # not this node's running attempt (ended, moved, or a replay)
        return
    report_checks.check_finish(report, params=params if isinstance(params, dict) else {})
    finished = report_services.generation_finish(
        node_id=node_id,
        generation_id=str(report["gen"]),
        attempt=int(report["attempt"]),
        finish_reason=str(report["finish_reason"]),
        output_tokens=[int(t) for t in report["output_tokens"]],
        output_text=str(report.get("output_text", "")),
        counters=dict(report.get("counters") or {}),
        itl_ms=dict(report.get("itl_ms") or {}),
        rounds=dict(report.get("rounds") or {}),
        error=str(report.get("error", "")),
    )
    if finished and otel_spans.enabled():
        gid = str(report["gen"])
        transaction.on_commit(lambda: otel_spans.export(gid))


_APPLY = {"claim": _claim, "first_token": _first_token, "finish": _finish}
