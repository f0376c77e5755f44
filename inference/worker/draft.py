"""The drafter's loop: commit the verifier's results, then draft for ALL ready sequences
in one batched propose and send ONE message per verifier with those drafts.

k is chosen every round by `fleet.planner.adaptive.AdaptiveK` (adaptive policies) from what
this loop measures: its drafts' acceptance by position, its propose time by (batch, k), and
the verifier's forward cost and round trip that come back with the results.

A configuration that names another draft (drafter kind or draft model: `pipeline_swap_draft`,
e.g. when a learned draft is ready) loads it between rounds and moves the sequences in flight
over with their contexts; if it cannot be loaded, the old draft keeps drafting. Verification
is exact whatever drafts, so a swap never changes an output."""

from __future__ import annotations

import logging
import time
from collections import defaultdict, deque

from fleet.planner.adaptive import AdaptiveK
from fleet.planner.costs import StepCosts
from inference.worker import canary, cost_sweep
from inference.worker.engine_loop import FINAL, BaseLoop

logger = logging.getLogger(__name__)


class DraftLoop(BaseLoop):
    role = "draft"

    def __init__(self, *, engine, **kwargs):
        super().__init__(**kwargs)
        self.engine = engine
        self.verifier_of: dict[str, int] = {}  # gen -> verifier node id
        self.attempt_of: dict[str, int] = {}
        self.params_of: dict[str, object] = {}  # gen -> SamplingParams (for a draft swap)
        self.ready: list[str] = []
        self.adaptive = AdaptiveK()
        # gen -> the k asked of the drafter in its last round. Asked, not returned: a drafter
        # that finds nothing to propose (an n-gram table without a match) drafts fewer tokens,
        # and counting only what it returned made acceptance the acceptance *given* a proposal,
        # so adaptive k priced drafts that were never made (k 4 for α 0.34 on smollm2).
        self.drafted_k: dict[str, int] = {}
        # gen -> the token drafted in the shadow at k = 0 (None: the drafter proposed nothing)
        self.shadow: dict[str, int | None] = {}
        # verifier -> (when this round's drafts left, their k), until its results come
        self.sent_to: dict[int, tuple[float, int]] = {}
        # verifier -> its round whose results came last: when its drafts left, the verifier's
        # busy seconds (forward and prefills), batch, k, the sequences going on, and this
        # drafter's sequences in it with the tokens they received
        self.verified: dict[int, tuple[float, float, int, int, frozenset[str], int, int]] = {}
        self.rounds = 0
        # seconds of shadow drafting this drafter may still spend (SHADOW_BUDGET), and when
        # that credit was last topped up
        self.shadow_credit, self.shadow_clock = 0.0, time.monotonic()
        self.k_trace: deque[tuple[float, int, int]] = deque(maxlen=256)  # (time, batch, k)
        self.loaded = self.draft_ref()  # what the engine drafts with (boot loaded the config's)

    def _sweep(self, engine) -> StepCosts:
        max_batch = int(self.config.get("max_verify_batch") or 32)
        return cost_sweep.sweep_draft(engine, max_batch=max_batch)

    def prepare(self) -> None:
        t0 = time.perf_counter()
        self.adaptive.draft_costs = self._sweep(self.engine)
        self.adaptive.sweep_s = round(time.perf_counter() - t0, 3)
        logger.info(
            "drafter %s: draft cost sweep %d cells in %.2f s",
            self.node_id,
            len(self.adaptive.draft_costs),
            self.adaptive.sweep_s,
        )

    def handle(self, kind: str, p: dict) -> None:
        if kind == "draft_start":
            self._add(p)
        elif kind == "results":
            self._measure(p)
            self._commit(p["verifier"], p["results"])
            if p.get("seqs"):  # new sequences of the same verifier, drafted with this group
                self._add(p)
        elif kind == "cancel":
            sender = p.get("verifier")  # set when a peer sent it: only the sequence's verifier
            if sender is None or self.verifier_of.get(p["gen"]) in (None, sender):
                self.drop(p["gen"], p.get("attempt", FINAL))
        elif kind == "config":
            self.apply_pipeline_config(p)
        else:
            logger.warning("drafter %s: unknown message %r", self.node_id, kind)

    def _add(self, p: dict) -> None:
        """Start a message's new sequences, their contexts prefilled in one batched forward
        (one by one only when the batch fails, so one bad context costs no other)."""
        from inference.engine.sampling import SamplingParams

        fresh: dict[str, tuple[int, list[int], SamplingParams]] = {}
        for s in p["seqs"]:
            gid, attempt = s["gen"], s.get("attempt", 1)
            if self.tombstones.blocks(gid, attempt):
                continue
            if gid in self.verifier_of:  # a re-routed sequence: begin again
                self.drop(gid, self.attempt_of[gid])
            fresh[gid] = (attempt, s["ctx"], SamplingParams.from_json(s["params"]))
        try:
            self.engine.add_many([(g, ctx, params) for g, (_, ctx, params) in fresh.items()])
            added = list(fresh)
        except Exception:
            for gid in fresh:  # whatever the failed batch allocated
                self.engine.free(gid)
            added = [gid for gid, item in fresh.items() if self._add_one(p, gid, item)]
        for gid in added:
            self.verifier_of[gid], self.attempt_of[gid] = p["verifier"], fresh[gid][0]
            self.params_of[gid] = fresh[gid][2]
            self.ready.append(gid)
        self._inspect_dirty = True

    def _add_one(self, p: dict, gid: str, item: tuple) -> bool:
        _, ctx, params = item
        try:
            self.engine.add(gid, ctx, params)
            return True
        except Exception:
            self.engine.free(gid)  # a slot it may have taken before failing
            logger.exception(
                "drafter %s: cannot add %s; it decodes without drafts", self.node_id, gid
            )
            self.send(
                p["verifier"], "drafts", {"drafter": self.node_id, "drafts": [], "plain": [gid]}
            )
            return False

    def _measure(self, p: dict) -> None:
        """What a results message tells adaptive k: the round trip, the verifier's costs,
        and how many of each sequence's drafts (or shadow draft) were accepted."""
        # this drafter's sequences on that verifier (not a stale verifier's, not unknown)
        mine = [r for r in p["results"] if self.verifier_of.get(r["seq_id"]) == p["verifier"]]
        sent_k = self.sent_to.pop(p["verifier"], None)
        if sent_k is not None:
            sent, k_sent = sent_k
            verify_s, vbatch = float(p.get("verify_s") or 0.0), int(p.get("vbatch") or 0)
            vbatch = vbatch or len(p["results"])
            self.adaptive.observe_round_trip(time.monotonic() - sent, verify_s, vbatch)
            # the verifier's prefills that held the round back are counted as its own work
            busy = verify_s + max(float(p.get("stall_s") or 0.0), 0.0)
            going_on = frozenset(r["seq_id"] for r in p["results"] if not r.get("finished"))
            emitted = sum(len(r["tokens"]) for r in mine)
            self.verified[p["verifier"]] = (
                sent,
                busy,
                vbatch,
                k_sent,
                going_on,
                len(mine),
                emitted,
            )
        if p.get("costs"):
            self.adaptive.merge_verify_costs(p["costs"])
        ks, ns, shadow_n, shadow_ok = [], [], 0, 0
        for r in mine:
            gid = r["seq_id"]
            k = self.drafted_k.pop(gid, 0)
            if k:
                ks.append(k)
                ns.append(int(r["n_accepted"]))
            if gid in self.shadow and r["tokens"]:
                token = self.shadow.pop(gid)
                shadow_n += 1
                shadow_ok += int(token is not None and r["tokens"][0] == token)
        if ks:
            self.adaptive.acceptance.observe_lengths(ks, ns)
        if shadow_n:
            self.adaptive.acceptance.observe([shadow_n], [shadow_ok])

    def _commit(self, verifier: int, results: list[dict]) -> None:
        for r in results:
            gid = r["seq_id"]
            if self.verifier_of.get(gid) != verifier:  # unknown, or a stale verifier's
                continue
            if r["finished"]:
                self.drop(gid, self.attempt_of[gid])
                continue
            self.engine.commit(gid, r["tokens"], r["n_accepted"])
            self.ready.append(gid)

    def drop(self, gid: str, attempt: float = FINAL) -> None:
        self.tombstones.add(gid, attempt)
        if gid in self.verifier_of and self.attempt_of[gid] <= attempt:
            self.verifier_of.pop(gid)
            self.attempt_of.pop(gid)
            self.params_of.pop(gid, None)
            self.engine.free(gid)
            self.drafted_k.pop(gid, None)
            self.shadow.pop(gid, None)
            self._inspect_dirty = True
            if gid in self.ready:
                self.ready.remove(gid)

    # -- draft swaps ------------------------------------------------------------------------
    def draft_ref(self, config: dict | None = None) -> tuple[str, str]:
        """(drafter kind, draft model) this configuration drafts with ("none" drafts nothing
        but keeps an n-gram drafter loaded, as boot does)."""
        c = self.config if config is None else config
        kind = c.get("drafter_kind") or "ngram"
        kind = "ngram" if kind == "none" else kind
        return kind, (c.get("draft_model") or "") if kind == "model" else ""

    def apply_pipeline_config(self, payload: dict) -> None:
        super().apply_pipeline_config(payload)
        if self.draft_ref() != self.loaded:  # a draft that failed to load is tried again
            self.swap_engine()
        canary.apply(self)  # a candidate draft on a share of sequences (learning from traffic)

    def swap_engine(self) -> bool:
        """Load the configured draft and move every sequence over to it; False (and the old
        draft kept) when it cannot be loaded."""
        from inference.worker import engine_cache

        kind, ref = self.draft_ref()
        t0 = time.perf_counter()
        try:
            engine = engine_cache.load_draft_engine(kind, ref)
        except Exception:
            logger.exception(
                "drafter %s: cannot load the %s draft %r; the old one keeps drafting",
                self.node_id,
                kind,
                ref,
            )
            return False
        # its own costs, measured before it takes the sequences (the sweep needs free slots)
        self.adaptive.new_draft(self._sweep(engine))
        self.shadow.clear()  # the old draft's shadow guesses
        old, self.engine, self.loaded = self.engine, engine, (kind, ref)
        moved = [(g, self._context(old, g), self.params_of.get(g)) for g in self.verifier_of]
        for gid, _, _ in moved:
            old.free(gid)
        try:
            engine.add_many(moved)
        except Exception:  # e.g. fewer slots: one by one, the rest decode without drafts
            for gid, _, _ in moved:
                engine.free(gid)
            for gid, ctx, params in moved:
                if not self._add_one({"verifier": self.verifier_of[gid]}, gid, (0, ctx, params)):
                    self.drop(gid, self.attempt_of[gid])
        self._inspect_dirty = True
        logger.warning(
            "drafter %s: now drafting with the %s draft %r (%d sequences moved, %.1f s)",
            self.node_id,
            kind,
            ref or "-",
            len(moved),
            time.perf_counter() - t0,
        )
        return True

    @staticmethod
    def _context(engine, gid: str) -> list[int]:
        d = engine.drafter
        return list(d.seqs[gid].ctx if hasattr(d, "seqs") else d.ctx[gid])

    def step(self) -> None:
        phase, t0 = self.stats.add_phase, time.perf_counter()
        items = self._drain(0.0 if self.ready else 0.5)
        t1 = time.perf_counter()
        phase("wait", t1 - t0)
        for kind, payload in items:
            self.handle(kind, payload)
        phase("handle", time.perf_counter() - t1)
        if not self.ready:
            return
        batch, self.ready = self.ready, []
        policy = self.config.get("k_policy") or {}
        k = self.adaptive.choose(policy, len(batch))
        if self.config.get("drafter_kind") == "none":
            k = 0
        self.rounds += 1
        t0 = time.perf_counter()
        try:
            drafts = [d.to_json() for d in self.engine.propose([(g, k) for g in batch])]
        except Exception:  # never strand sequences: this round they go without drafts
            logger.exception("drafter %s: propose failed; sending empty drafts", self.node_id)
            drafts = [{"seq_id": g, "tokens": [], "probs": None} for g in batch]
        t1 = time.perf_counter()
        self.stats.record_round(len(batch), t1 - t0, sum(len(d["tokens"]) for d in drafts))
        self.stats.record_k(len(batch), k)
        self.k_trace.append((round(time.time(), 3), len(batch), k))
        if k > 0:
            self.adaptive.draft_costs.observe(len(batch), k, t1 - t0)
        out = defaultdict(list)
        for d in drafts:
            self.drafted_k[d["seq_id"]] = k
            out[self.verifier_of[d["seq_id"]]].append(d)
        now = time.monotonic()
        for verifier, ds in out.items():
            self.send(verifier, "drafts", {"drafter": self.node_id, "drafts": ds})
            self._round_period(verifier, now, t1 - t0, ds)
            self.sent_to[verifier] = (now, k)
        phase("propose", t1 - t0)
        t2 = time.perf_counter()
        phase("send", t2 - t1)
        if (
            k == 0
            and policy.get("mode") == "adaptive"
            and self.config.get("drafter_kind") != "none"
        ):
            self._shadow_within_budget(batch)
            phase("shadow", time.perf_counter() - t2)

    def _round_period(self, verifier: int, now: float, propose_s: float, drafts: list) -> None:
        """A round with `verifier` ended when its results came back and this round's drafts
        left: its period (from the drafts those results answered) tells adaptive k what the round
        spends outside its forward passes. Only a round of sequences going on from that one:
        a sequence joining waited for its request, claim and prefill (a request's cost, which
        read as a round's made one k look dear at random)."""
        done = self.verified.pop(verifier, None)
        if done is None:
            return
        last, busy_s, vbatch, k, going_on, n_mine, emitted = done
        if all(d["seq_id"] in going_on for d in drafts):
            period = now - last
            a_round = self.adaptive.observe_round_period(period, propose_s, busy_s, vbatch, k)
            if a_round and n_mine:  # what the k that ran gave, against its prediction
                self.adaptive.observe_realized(n_mine, k, emitted / n_mine / period, period)

    # Two sequences a round: one draft step over two sequences costs a fraction of the
    # verifier's forward it overlaps, and gives the change detector (which needs 8 recent
    # position-0 drafts) a verdict within 4-8 rounds even at batch 1.
    SHADOW_SEQS = 2

    # Shadow drafts may take this share of the drafter's time. An n-gram drafter's cost
    # nothing and run every round; a model drafter's are a forward pass (the sequences taken
    # and their catch-up tokens) on the cores the verifier uses, every round while at k 0
    # (bench_draft, session 14, 8 streams on 2 cores: adaptive 0.85 of plain with k 0 in 179
    # of 232 rounds; the shadow drafts' share of that loss was not measured apart). Within
    # the budget they run every few rounds.
    SHADOW_BUDGET = 0.1
    SHADOW_CREDIT_MAX_S = 0.1  # no burst of shadow drafts after a quiet spell

    def _shadow_within_budget(self, batch: list[str]) -> None:
        now = time.monotonic()
        self.shadow_credit = min(
            self.shadow_credit + self.SHADOW_BUDGET * (now - self.shadow_clock),
            self.SHADOW_CREDIT_MAX_S,
        )
        self.shadow_clock = now
        if self.shadow_credit < 0:
            return
        t0 = time.perf_counter()
        self._shadow(batch)
        self.shadow_credit -= time.perf_counter() - t0

    def _shadow(self, batch: list[str]) -> None:
        """At k = 0, draft one token for a few sequences without sending it (the verifier is
        busy with the round meanwhile) and compare it with the token the verifier emits: the
        acceptance of position 0 stays measured while no draft is. The sequences taken turn
        about (a drafter may propose for some sequences and never for others), and one it
        proposes nothing for counts as a rejected draft, as it does at k > 0."""
        start = (self.rounds * self.SHADOW_SEQS) % len(batch)
        seqs = (batch[start:] + batch[:start])[: self.SHADOW_SEQS]
        try:
            drafts, _ = self.engine.drafter.propose([(g, 1) for g in seqs])
        except Exception:
            logger.exception("drafter %s: shadow draft failed", self.node_id)
            return
        for d in drafts:
            self.shadow[d.seq_id] = d.tokens[0] if d.tokens else None

    def slots(self) -> dict:
        n_free = self.engine.n_free
        d = self.engine.drafter
        n_slots = d.cache.n_slots if hasattr(d, "cache") else None
        used = (n_slots - n_free) if n_slots is not None else len(self.verifier_of)
        return {"n_slots": n_slots, "slots_used": used, "seqs": sorted(self.verifier_of)}

    def inspect(self) -> dict:
        out = super().inspect()
        out["adaptive"] = self.adaptive.snapshot()
        out["k_trace"] = list(self.k_trace)
        return out
