"""The drafter's loop: commit the verifier's results, then draft for ALL ready sequences
in one batched propose and send ONE message per verifier with those drafts.

A configuration that names another draft (drafter kind or draft model: `pipeline_swap_draft`,
e.g. when a learned draft is ready) loads it between rounds and moves the sequences in flight
over with their contexts; if it cannot be loaded, the old draft keeps drafting. Verification
is exact whatever drafts, so a swap never changes an output."""

from __future__ import annotations

import logging
import time
from collections import defaultdict

from fleet.pipelines.policy import k_for
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
        self.measured: dict = {}  # adaptive k: goodput by k (filled by the planner's policy)
        self.loaded = self.draft_ref()  # what the engine drafts with (boot loaded the config's)

    def handle(self, kind: str, p: dict) -> None:
        if kind == "draft_start":
            self._add(p)
        elif kind == "results":
            self._commit(p["verifier"], p["results"])
            if p.get("seqs"):  # new sequences of the same verifier, drafted with this group
                self._add(p)
        elif kind == "cancel":
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
        k = k_for(self.config.get("k_policy") or {}, len(batch), self.measured)
        if self.config.get("drafter_kind") == "none":
            k = 0
        t0 = time.perf_counter()
        try:
            drafts = [d.to_json() for d in self.engine.propose([(g, k) for g in batch])]
        except Exception:  # never strand sequences: this round they go without drafts
            logger.exception("drafter %s: propose failed; sending empty drafts", self.node_id)
            drafts = [{"seq_id": g, "tokens": [], "probs": None} for g in batch]
        t1 = time.perf_counter()
        self.stats.record_round(len(batch), t1 - t0, sum(len(d["tokens"]) for d in drafts))
        out = defaultdict(list)
        for d in drafts:
            out[self.verifier_of[d["seq_id"]]].append(d)
        for verifier, ds in out.items():
            self.send(verifier, "drafts", {"drafter": self.node_id, "drafts": ds})
        phase("propose", t1 - t0)
        phase("send", time.perf_counter() - t1)

    def slots(self) -> dict:
        n_free = self.engine.n_free
        d = self.engine.drafter
        n_slots = d.cache.n_slots if hasattr(d, "cache") else None
        used = (n_slots - n_free) if n_slots is not None else len(self.verifier_of)
        return {"n_slots": n_slots, "slots_used": used, "seqs": sorted(self.verifier_of)}
