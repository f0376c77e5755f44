"""The verifier's loop: prefill new sequences, gather drafts from drafters up to the
pipeline's max_verify_batch or max_batch_wait_ms, verify them in ONE forward pass, stream
the accepted tokens, and send each drafter ONE message with its results.

Starts -- claims, prefill, held first tokens, joining a drafter's running group -- are
`inference.worker.verify_starts.VerifyStarts`, the base class this loop extends."""

from __future__ import annotations

import logging
import statistics
import time
from collections import defaultdict

from fleet.planner.costs import StepCosts
from inference import wire
from inference.worker import cost_sweep
from inference.worker.engine_loop import FINAL
from inference.worker.verify_starts import Held, VerifyStarts, VSeq

logger = logging.getLogger(__name__)

COSTS_EVERY = 20  # rounds between copies of the verify cost table sent to each drafter


def for_drafter(r) -> dict:
    """A result as its drafter needs it: without logprobs (they are for the client)."""
    d = r.to_json()
    d.pop("logprobs", None)
    d.pop("prompt_logprobs", None)
    return d


def itl_summary(values: list[float]) -> dict:
    if not values:
        return {}
    s = sorted(values)
    return {
        "p50": s[len(s) // 2],
        "p99": s[min(len(s) - 1, int(len(s) * 0.99))],
        "mean": statistics.fmean(s),
        "n": len(s),
    }


class VerifyLoop(VerifyStarts):
    role = "verify"

    def __init__(self, *, engine, **kwargs):
        super().__init__(**kwargs)
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.seqs: dict[str, VSeq] = {}
        self.pending: dict[str, tuple[list[int], object, float]] = {}  # gen -> draft, arrival
        self.starts: list[dict] = []  # not yet claimed
        self.claiming: dict[tuple[str, int], dict] = {}  # reported, not yet claimed
        self.held: dict[str, Held] = {}  # prefilled, claim not confirmed yet
        self.sent_at: dict[str, float] = {}  # gen -> when its results went to the drafter
        self.deferred: dict[int, list[dict]] = defaultdict(list)  # drafter -> draft_starts
        self.turnaround: float | None = None  # drafter round trip (EMA, seconds)
        self.costs = StepCosts()  # forward seconds by (batch, tokens per sequence)
        self.sweep_s: float | None = None
        self.costs_sent: dict[int, int] = {}  # drafter -> round its copy of the costs went out
        self.rounds = 0
        # seconds the rounds were held back since the last one, to claim and prefill new
        # sequences: a request's cost, not a round's (the drafter's round periods less it)
        self.stall_s = 0.0

    def prepare(self) -> None:
        t0 = time.perf_counter()
        max_batch = int(self.config.get("max_verify_batch") or 32)
        self.costs = cost_sweep.sweep_verify(self.engine, max_batch=max_batch)
        self.sweep_s = round(time.perf_counter() - t0, 3)
        logger.info(
            "verifier %s: verify cost sweep %d cells in %.2f s",
            self.node_id,
            len(self.costs),
            self.sweep_s,
        )

    # -- messages -------------------------------------------------------------------------------
    def handle(self, kind: str, p: dict) -> None:
        if kind == "start":
            self.starts.append(p)
        elif kind == "claimed":  # from the ledger, after its commit
            self._confirm(p.get("starts", []), p.get("refused", []))
        elif kind == "drafts":
            from inference.engine.messages import Draft

            now = time.monotonic()
            sender = p.get("drafter")  # the real sender (wire.receive names it)
            for gid in p.get("plain", []):  # the drafter cannot serve it: decode plainly
                if gid in self.seqs and self.seqs[gid].drafter == sender:
                    self.seqs[gid].drafter = None
            for d in p["drafts"]:
                draft = Draft.from_json(d)
                # only the sequence's own drafter drafts for it (not another node's word)
                if draft.seq_id in self.seqs and self.seqs[draft.seq_id].drafter == sender:
                    self.pending[draft.seq_id] = (draft.tokens, draft.probs, now)
                    sent = self.sent_at.pop(draft.seq_id, None)
                    if sent is not None:
                        rtt = now - sent
                        self.turnaround = (
                            rtt if self.turnaround is None else 0.8 * self.turnaround + 0.2 * rtt
                        )
        elif kind == "cancel":
            self.drop(p["gen"], p.get("attempt", FINAL))
        elif kind == "drafter_lost":
            self.drafter_lost(int(p["drafter"]))
        elif kind == "config":
            self.apply_pipeline_config(p)
        else:
            logger.warning("verifier %s: unknown message %r", self.node_id, kind)

    def drop(self, gid: str, attempt: float = FINAL) -> None:
        self.tombstones.add(gid, attempt)
        self.starts = [s for s in self.starts if not self.tombstones.blocks(s["gen"], s["attempt"])]
        held = self.held.get(gid)
        if held is not None and held.attempt <= attempt:
            del self.held[gid]
        seq = self.seqs.get(gid)
        if seq is not None and seq.attempt <= attempt:
            self.seqs.pop(gid)
            self.pending.pop(gid, None)
            self.sent_at.pop(gid, None)
            self.engine.free(gid)
            self._inspect_dirty = True

    # Drafts this late were lost, not slow: a message can vanish with a Redis restart (its
    # last second of writes is not on disk) or a failed send. Without a bound the sequence
    # would wait forever and, since its drafter looks busy, hold back the draft_starts of
    # every later sequence of that drafter (tests/foundation/test_up_redis_restart.py caught
    # a request stranded so). Generous: a false alarm only decodes one sequence plainly.
    OVERDUE_MIN_S = 5.0
    OVERDUE_TURNAROUNDS = 50

    def _give_up_overdue(self) -> None:
        """Sequences whose drafts are overdue go on by plain decoding (lossless, as for a
        lost drafter); their drafter is told to drop them."""
        if not self.sent_at:
            return
        limit = max(self.OVERDUE_MIN_S, self.OVERDUE_TURNAROUNDS * (self.turnaround or 0.0))
        now = time.monotonic()
        late = [g for g, at in self.sent_at.items() if now - at > limit and g in self.seqs]
        for gid in late:
            seq = self.seqs[gid]
            drafter = seq.drafter
            self._go_plain(gid, seq)
            if drafter is not None:
                self.send(drafter, "cancel", {"gen": gid, "attempt": seq.attempt})
        if late:
            self.stats.record_degraded(len(late))
            self._inspect_dirty = True
            logger.warning(
                "verifier %s: drafts for %d sequence(s) overdue by %.1f s; decoding them plainly",
                self.node_id,
                len(late),
                limit,
            )

    def drafter_lost(self, drafter: int) -> None:
        """The control plane saw this drafter die: its sequences here go on by plain
        decoding (k=0) from where they are -- same attempt, no re-prefill -- and are counted.
        Drafts already in hand are dropped with the rest: from now on nothing waits on it."""
        n = 0
        for p in self.starts:  # not prefilled yet
            if p.get("drafter") == drafter:
                p["drafter"], n = None, n + 1
        for gid, seq in self.seqs.items():
            if seq.drafter == drafter:
                self._go_plain(gid, seq)
                n += 1
        self.deferred.pop(drafter, None)
        self.costs_sent.pop(drafter, None)
        if n:
            self.stats.record_degraded(n)
            self._inspect_dirty = True
            logger.warning("verifier %s: drafter %s lost; %d plain", self.node_id, drafter, n)

    def _go_plain(self, gid: str, seq: VSeq) -> None:
        """From now on this sequence decodes plainly: nothing of it waits on a drafter."""
        seq.drafter = None
        self.pending.pop(gid, None)
        self.sent_at.pop(gid, None)
        if gid in self.held and self.held[gid].draft_start is not None:
            self.held[gid].draft_start = None

    # -- the loop ---------------------------------------------------------------------------------
    def step(self) -> None:
        max_batch = int(self.config.get("max_verify_batch") or 32)
        wait_s = float(self.config.get("max_batch_wait_ms") or 0) / 1000
        phase, t0 = self.stats.add_phase, time.perf_counter()
        items = self._drain(self._gather_for(max_batch, wait_s))
        t1 = time.perf_counter()
        phase("wait", t1 - t0)
        for kind, payload in items:
            self.handle(kind, payload)
        t0 = time.perf_counter()
        phase("handle", t0 - t1)
        if self.starts:  # claim and prefill now: never behind the round below
            # No more than the free KV slots: the rest wait here, unclaimed, for a later step.
            starts = self._fresh(self.starts)
            free = self.engine.n_free
            starts, self.starts = starts[:free], starts[free:]
            if starts:
                self._start(self._claim_later(starts))
                # What came during the prefill, before the round (which takes a while): the
                # ledger's answer to these claims (their first tokens go out now, not after
                # the round) and drafts that can join this round's batch.
                for kind, payload in self._drain(0.0):
                    self.handle(kind, payload)
            t1 = time.perf_counter()
            phase("start", t1 - t0)
            self.stall_s += t1 - t0
            t0 = t1
        self._give_up_overdue()
        ready = self._ready()
        if ready and self._gather_for(max_batch, wait_s) == 0.0:
            self._verify(ready[:max_batch])
        self._flush_deferred()
        phase("verify_round", time.perf_counter() - t0)

    def _gather_for(self, max_batch: int, wait_s: float) -> float:
        """How long to keep gathering drafts before verifying (0: verify now).

        Verify at once when every sequence held here is ready (or the batch is full).
        Otherwise wait -- never past `max_batch_wait_ms` after the first ready draft -- but
        only for drafts that are due: the earliest outstanding sequence's results went out
        at t, and drafts come back after the drafter's measured turnaround. A group that
        is not due within the wait is not waited for (that would only add latency)."""
        ready = self._ready()
        if not ready:
            return 0.5
        if len(ready) >= min(max_batch, len(self.seqs)):
            return 0.0
        now = time.monotonic()
        first = min((self.pending[g][2] for g in ready if g in self.pending), default=now)
        deadline = first + wait_s
        out = [
            self.sent_at[g]
            for g, q in self.seqs.items()
            if q.drafter is not None and g not in self.pending and g in self.sent_at
        ]
        if not out:
            return 0.0
        eta = deadline if self.turnaround is None else min(out) + 1.2 * self.turnaround
        if eta > deadline:
            return 0.0
        return max(0.0, eta - now)

    def _ready(self) -> list[str]:
        """Sequences that can be verified now: drafts in hand, or plain (no drafter); not those
        whose claim is unconfirmed."""
        out = [g for g in self.pending if g in self.seqs]
        out += [g for g, s in self.seqs.items() if s.drafter is None and g not in self.pending]
        return [g for g in out if g not in self.held] if self.held else out

    # -- verification ------------------------------------------------------------------------------
    def _verify(self, batch: list[str]) -> None:
        items = []
        for g in batch:
            tokens, probs, _ = self.pending.pop(g, ([], None, 0))
            items.append((g, tokens, probs))
        t0 = time.perf_counter()
        try:
            results = self.engine.verify(items)
        except Exception as exc:  # a bad draft or a broken engine: fail them clearly, never hang
            logger.exception("verifier %s: verify failed", self.node_id)
            for g in batch:
                seq = self.seqs.pop(g, None)
                if seq is not None:
                    self.engine.free(g)
                    self._fail(seq, f"verification failed: {exc}")
            self._inspect_dirty = True
            return
        t1 = time.perf_counter()
        self.stats.record_round(len(items), t1 - t0, sum(len(r.tokens) for r in results))
        self.costs.observe(len(items), 1 + max(len(t) for _, t, _ in items), t1 - t0)
        self.rounds += 1
        stall_s, self.stall_s = self.stall_s, 0.0
        by_drafter = defaultdict(list)
        events = self._emit(results, by_drafter=by_drafter, verify_s=t1 - t0)
        t2 = time.perf_counter()
        for drafter, rs in by_drafter.items():  # the drafter first: it is waiting
            payload = {
                "verifier": self.node_id,
                "results": rs,
                "verify_s": t1 - t0,  # the drafter's adaptive k: the round's forward
                "vbatch": len(items),
                "stall_s": stall_s,  # and the prefills that held this round back
            }
            if self.rounds - self.costs_sent.get(drafter, -(10**9)) >= COSTS_EVERY:
                payload["costs"] = self.costs.to_json()
                self.costs_sent[drafter] = self.rounds
            if seqs := self._take_deferred(drafter):
                payload["seqs"] = seqs  # new sequences join this group's next draft batch
            self.send(drafter, "results", payload)
        self._flush_deferred()
        t3 = time.perf_counter()
        self.retrying(wire.publish_many, events, node=self.node_id)
        phase = self.stats.add_phase
        phase("verify_forward", t1 - t0)
        phase("verify_emit", t2 - t1)
        phase("verify_send", t3 - t2)
        phase("verify_publish", time.perf_counter() - t3)

    def _emit(
        self, results, *, by_drafter=None, drafter_starts=None, items=None, verify_s=None
    ) -> list:
        """Stream each result's tokens; finish sequences; collect drafter messages.
        `verify_s`: the verify round's forward time (None for a prefill's first tokens)."""
        now = time.monotonic()
        events, itl = [], []
        for i, r in enumerate(results):
            seq = self.seqs.get(r.seq_id)
            if seq is None:
                continue
            if verify_s is not None:
                seq.log.round(
                    k=r.n_drafted, accepted=r.n_accepted, batch=len(results), verify_s=verify_s
                )
            # the prompt's logprobs ride on the attempt's first event (a resumed attempt
            # scored prompt + earlier tokens: only the prompt's are the prompt's)
            plp = None if r.prompt_logprobs is None else r.prompt_logprobs[: seq.prompt_len]
            if r.tokens:
                if seq.last_emit:
                    gap = (now - seq.last_emit) / len(r.tokens)
                    seq.itl_ms.extend([gap * 1000] * len(r.tokens))
                    itl.extend([gap] * len(r.tokens))
                seq.last_emit = now
                seq.tokens.extend(r.tokens)
                text = seq.detok.push(r.tokens)
                if r.finished:
                    text += seq.detok.finish()
                event = wire.tokens_event(r.tokens, text, len(seq.tokens))
                events.append((seq.gen, wire.with_logprobs(event, logprobs=r.logprobs, prompt=plp)))
                plp = None
            if r.finished:
                counters = self._finish(seq, r.finish_reason or "stop")
                done = wire.done_event(
                    r.finish_reason or "stop", seq.prompt_len, len(seq.tokens), spec=counters
                )
                events.append((seq.gen, wire.with_logprobs(done, prompt=plp)))
            if seq.drafter is None:
                continue
            if not r.finished:
                self.sent_at[seq.gen] = now
            if drafter_starts is not None and not r.finished:
                ctx = items[i][1] + r.tokens
                drafter_starts[seq.drafter].append(
                    {
                        "gen": seq.gen,
                        "attempt": seq.attempt,
                        "ctx": ctx,
                        "params": items[i][2].to_json(),
                    }
                )
            if by_drafter is not None:
                by_drafter[seq.drafter].append(for_drafter(r))
        self.stats.record_latencies(itl_s=itl)
        return events

    def _finish(self, seq: VSeq, finish_reason: str):
        """Free the sequence and report its finish; returns its counters (or None)."""
        counters = self.engine.free(seq.gen)
        self.seqs.pop(seq.gen, None)
        self.pending.pop(seq.gen, None)
        self.sent_at.pop(seq.gen, None)
        self.tombstones.add(seq.gen, seq.attempt)
        self.stats.finished += 1
        self._inspect_dirty = True
        self.report(
            "finish",
            gen=seq.gen,
            attempt=seq.attempt,
            finish_reason=finish_reason,
            output_tokens=list(seq.tokens),
            output_text=seq.detok.text,
            counters=counters.to_dict() if counters is not None else {},
            itl_ms=itl_summary(seq.itl_ms),
            rounds=seq.log.to_json(),
        )
        return counters

    def _fail(self, seq: VSeq, error: str) -> None:
        self.tombstones.add(seq.gen, seq.attempt)
        self.stats.errors += 1
        self.retrying(wire.publish, seq.gen, wire.error_event(error), node=self.node_id)
        self.report(
            "finish",
            gen=seq.gen,
            attempt=seq.attempt,
            finish_reason="error",
            output_tokens=list(seq.tokens),
            output_text=seq.detok.text,
            counters={},
            itl_ms={},
            rounds=seq.log.to_json(),
            error=error,
        )
        if seq.drafter is not None:
            self.send(seq.drafter, "cancel", {"gen": seq.gen})

    def inspect(self) -> dict:
        out = super().inspect()
        out["drafter_turnaround_ms"] = None if self.turnaround is None else self.turnaround * 1000
        out["step_costs"] = self.costs.to_json()
        out["sweep_s"] = self.sweep_s
        return out

    def slots(self) -> dict:
        cache = self.engine.cache
        return {
            "n_slots": cache.n_slots,
            "slots_used": cache.n_slots - cache.n_free,
            "seqs": sorted(self.seqs),
        }
