"""The verifier loop's starts: `VerifyStarts` is the half of `inference.worker.verify.
VerifyLoop` that takes new sequences in (the loop is its subclass and owns the state).

A start is claimed (queued -> running) by a signed report to the control plane's ledger
(`inference.ledger`; the node holds no database credentials) and prefilled AT ONCE, in the
step it arrived in, while the claim travels: its first tokens are held back (nothing is
streamed, it is not verified further) until the ledger's `claimed` answer confirms the
attempt, and dropped if the ledger refuses it (cancelled or re-routed meanwhile). A new
request's TTFT is then the longer of its prefill and its claim, not their sum plus a round.
Reports (claims, first tokens, finishes) leave in order on one reporter thread and are
applied in order, so a finish never overtakes its claim.

A new sequence joins its drafter's running group: while the drafter has sequences in flight
here, the new sequence's draft_start rides along with their next results (one message), so
the drafter drafts it in the same batch as the rest and the verify batches stay large
instead of splitting into groups that drift apart."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from inference import wire
from inference.worker.detok import Detokenizer
from inference.worker.engine_cache import sampling_params
from inference.worker.engine_loop import FINAL, BaseLoop
from inference.worker.round_log import RoundLog

logger = logging.getLogger("inference.worker.verify")


@dataclass
class Held:
    """A prefilled start whose claim is not confirmed yet: what it will stream and send."""

    attempt: int
    created: float | None
    events: list = field(default_factory=list)  # (gen, event) to publish
    draft_start: tuple[int, dict] | None = None  # (drafter, its draft_start entry)


@dataclass
class VSeq:
    gen: str
    attempt: int
    drafter: int | None
    prompt_len: int  # the original prompt
    prev: int  # tokens emitted by earlier attempts
    detok: Detokenizer
    tokens: list[int] = field(default_factory=list)  # all emitted tokens (earlier attempts too)
    last_emit: float = 0.0
    itl_ms: list[float] = field(default_factory=list)
    log: RoundLog = field(default_factory=RoundLog)  # its rounds, for the timeline


class VerifyStarts(BaseLoop):
    """Claims, prefill, held first tokens and draft_starts; the rounds are the subclass's."""

    engine: Any
    tokenizer: Any
    seqs: dict[str, VSeq]
    pending: dict[str, tuple[list[int], Any, float]]
    held: dict[str, Held]
    claiming: dict[tuple[str, int], dict]
    sent_at: dict[str, float]
    deferred: dict[int, list[dict]]

    def drop(self, gid: str, attempt: float = FINAL) -> None:
        raise NotImplementedError

    def _emit(
        self, results, *, by_drafter=None, drafter_starts=None, items=None, verify_s=None
    ) -> list:
        raise NotImplementedError

    def _fail(self, seq: VSeq, error: str) -> None:
        raise NotImplementedError

    # -- prefill -----------------------------------------------------------------------------------
    def _fresh(self, starts: list[dict]) -> list[dict]:
        """Starts still to serve. A start of a later attempt of a sequence held here (it was
        re-routed back to this node and overtook the old attempt's cancel, which comes
        through the broker) replaces the old attempt."""
        out = []
        for p in starts:
            if self.tombstones.blocks(p["gen"], p["attempt"]):
                continue
            held = self.seqs.get(p["gen"])
            if held is not None:
                if held.attempt >= p["attempt"]:
                    continue
                p = self._resume_from_here(p, held)
                self.drop(p["gen"], held.attempt)
            out.append(p)
        return out

    def _resume_from_here(self, p: dict, old: VSeq) -> dict:
        """The old attempt ran here and kept streaming after the control plane took the
        stream's tokens for the new start: what it streamed (all of it, unless its first
        tokens were still held back) is the resume point, not the message's older copy."""
        if p["gen"] in self.held:
            return p
        tokens = [t for e in p.get("resume") or [] for t in e.get("tokens", [])]
        if len(old.tokens) <= len(tokens):
            return p
        return {
            **p,
            "resume": [wire.tokens_event(list(old.tokens), old.detok.text, len(old.tokens))],
        }

    def _claim_later(self, starts: list[dict]) -> list[dict]:
        """Report the claims (the ledger answers which are still queued for this node); the
        starts to prefill meanwhile."""
        starts = list({(p["gen"], p["attempt"]): p for p in self._fresh(starts)}.values())
        if len(self.claiming) > 4096:  # claims the ledger refused are forgotten, bounded
            for key in list(self.claiming)[:1024]:
                del self.claiming[key]
        for p in starts:
            self.claiming[(p["gen"], p["attempt"])] = p
        if starts:
            self.report("claim", starts=[[p["gen"], p["attempt"]] for p in starts])
        return starts

    def _confirm(self, claimed: list, refused: list) -> None:
        """The ledger's answer: stream what claimed starts hold back, let their drafters go;
        drop the refused ones (their attempt ended before it began)."""
        now, ttft, first = datetime.now(UTC), [], []
        events: list = []
        for gid, attempt in claimed:
            self.claiming.pop((gid, attempt), None)
            held = self.held.get(gid)
            if held is None or held.attempt != attempt:
                continue
            del self.held[gid]
            events.extend(held.events)
            first.append(gid)
            if held.created is not None and attempt == 1:
                ttft.append(now.timestamp() - held.created)
            if held.draft_start is not None and gid in self.seqs:
                drafter, entry = held.draft_start
                self.sent_at.pop(gid, None)  # set when the draft_start really goes out
                self.deferred[drafter].append(entry)
        for gid, attempt in refused:
            self.claiming.pop((gid, attempt), None)
            if gid in self.held and self.held[gid].attempt == attempt:
                self.drop(gid, attempt)
        if first:
            self.stats.record_latencies(ttft_s=ttft)
            self.report("first_token", ids=first, at=now.timestamp())
            self.retrying(wire.publish_many, events, node=self.node_id)
            self._flush_deferred()

    def _start(self, starts: list[dict]) -> None:
        """Prefill claimed-for starts together; hold what they emit until confirmed."""
        if not starts:
            return
        items, infos = [], []
        if lacking := sum(1 for p in starts if p.get("degraded")):  # no healthy drafter
            self.stats.record_degraded(lacking)
        for p in starts:
            prev_tokens, sent = self._resume_state(p) if p["attempt"] > 1 else ([], "")
            params = sampling_params(p["params"], already=len(prev_tokens))
            detok = Detokenizer(self.tokenizer, stop=params.stop, prefix_ids=prev_tokens, sent=sent)
            seq = VSeq(
                p["gen"],
                p["attempt"],
                p.get("drafter"),
                len(p["prompt_tokens"]),
                len(prev_tokens),
                detok,
                tokens=list(prev_tokens),
            )
            items.append((p["gen"], list(p["prompt_tokens"]) + prev_tokens, params))
            infos.append((seq, p))
        if not items:
            return
        try:
            t0 = time.perf_counter()
            results = self.engine.add_many(items)
            prefill_s = time.perf_counter() - t0
            self.stats.record_prefill(len(items), prefill_s)
            self.stats.add_phase("start_prefill", prefill_s)
        except Exception as exc:  # prompt too long, cache full, bad ids: fail these, clearly
            logger.exception("verifier %s: prefill failed", self.node_id)
            for seq, _ in infos:
                self.engine.free(seq.gen)
                self._fail(seq, f"prefill failed on verifier: {exc}")
            return
        for seq, p in infos:
            seq.log.prefilled(prefill_s)
            self.seqs[seq.gen] = seq
            self.held[seq.gen] = Held(seq.attempt, p.get("created"))
        drafter_starts: defaultdict[int, list[dict]] = defaultdict(list)
        for gid, event in self._emit(results, drafter_starts=drafter_starts, items=items):
            self.held[gid].events.append((gid, event))
        for drafter, seqs in drafter_starts.items():
            for s in seqs:
                self.sent_at.pop(s["gen"], None)
                self.held[s["gen"]].draft_start = (drafter, s)
        self._inspect_dirty = True

    def _in_flight(self, drafter: int) -> bool:
        """Whether sequences of this drafter are out for drafting or have drafts waiting to
        be verified: either way results go to that drafter soon."""
        return any(
            self.seqs[g].drafter == drafter
            for g in (*self.sent_at, *self.pending)
            if g in self.seqs
        )

    def _take_deferred(self, drafter: int) -> list[dict]:
        seqs = [s for s in self.deferred.pop(drafter, []) if s["gen"] in self.seqs]
        now = time.monotonic()
        for s in seqs:
            self.sent_at[s["gen"]] = now
        return seqs

    def _flush_deferred(self) -> None:
        """Send the draft_starts that no results message will carry soon (nothing of their
        drafter is in flight, so waiting would only stall them)."""
        for drafter in list(self.deferred):
            if not self._in_flight(drafter):
                seqs = self._take_deferred(drafter)
                if seqs:
                    self.send(drafter, "draft_start", {"verifier": self.node_id, "seqs": seqs})

    @staticmethod
    def _resume_state(p: dict) -> tuple[list[int], str]:
        # from the control plane (a node reads no stream: see inference.wire)
        events = [(None, e) for e in p.get("resume") or []]
        tokens = [t for _, e in events if e.get("type") == "tokens" for t in e["tokens"]]
        return tokens, wire.collect_text(events)
