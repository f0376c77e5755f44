"""A candidate draft canaried on a share of a drafter's sequences (learning from traffic).

The configuration's `canary` (`{"version", "draft_model", "fraction"}`, or None) names a
draft to load beside the serving one; `SplitEngine` then holds both and sends each sequence
to one of them by `inference.learning.split.in_canary` of its id -- the function the control
plane uses to put a finished generation's counters in an arm. To the loop it is one engine
(add, propose, commit, free, `drafter`), so the drafter's loop changes by one call
(`apply`). A candidate that cannot be loaded is logged and not canaried: both arms then
draft alike and the control plane rejects it. Verification is exact whatever drafts.
"""

from __future__ import annotations

import logging

from inference.learning.split import in_canary

logger = logging.getLogger(__name__)


class _Contexts:
    def __init__(self, split: SplitEngine) -> None:
        self.split = split

    def __getitem__(self, gid):
        d = self.split.engine_of(gid).drafter
        return d.seqs[gid].ctx if hasattr(d, "seqs") else d.ctx[gid]


class _Drafter:
    """What the loop reads of `engine.drafter`: contexts (a swap moves them) and propose."""

    def __init__(self, split: SplitEngine) -> None:
        self.split, self.ctx = split, _Contexts(split)

    def propose(self, requests):
        return self.split.propose_raw(requests)


class SplitEngine:
    def __init__(self, main, candidate, spec: dict) -> None:
        self.main, self.candidate, self.spec = main, candidate, spec
        self.fraction = float(spec.get("fraction") or 0.0)
        self.on_candidate: set[str] = set()
        self.drafter = _Drafter(self)

    def __getattr__(self, name):  # counters, info, tokenizer_hash, device: the serving draft's
        return getattr(self.main, name)

    def engine_of(self, gid):
        return self.candidate if gid in self.on_candidate else self.main

    @property
    def n_free(self):
        free = [n for n in (self.main.n_free, self.candidate.n_free) if n is not None]
        return min(free) if free else None

    def add(self, gid, ctx, params=None) -> None:
        self.add_many([(gid, ctx, params)])

    def add_many(self, items) -> None:
        canary = [it for it in items if in_canary(str(it[0]), self.fraction)]
        rest = [it for it in items if not in_canary(str(it[0]), self.fraction)]
        if canary:
            try:
                self.candidate.add_many(canary)
                self.on_candidate |= {str(it[0]) for it in canary}
            except Exception:  # the candidate is full or failed: the serving draft drafts
                for it in canary:
                    self.candidate.free(it[0])
                rest += canary
        if rest:
            self.main.add_many(rest)

    def _split(self, requests):
        mine = [r for r in requests if r[0] in self.on_candidate]
        return [r for r in requests if r[0] not in self.on_candidate], mine

    def propose(self, requests):
        main, cand = self._split(requests)
        out = {d.seq_id: d for d in self.main.propose(main)} if main else {}
        if cand:
            out |= {d.seq_id: d for d in self.candidate.propose(cand)}
        return [out[gid] for gid, _ in requests]

    def propose_raw(self, requests):
        main, cand = self._split(requests)
        drafts, steps = self.main.drafter.propose(main) if main else ([], 0)
        if cand:
            more, n = self.candidate.drafter.propose(cand)
            drafts, steps = drafts + more, steps + n
        return drafts, steps

    def commit(self, gid, tokens, n_accepted) -> None:
        self.engine_of(gid).commit(gid, tokens, n_accepted)

    def free(self, gid):
        engine = self.engine_of(gid)
        self.on_candidate.discard(gid)
        return engine.free(gid)


def wanted(config: dict) -> dict | None:
    """The canary this configuration asks for (a model draft only; None: no canary)."""
    spec = config.get("canary")
    if not spec or config.get("drafter_kind") == "none" or not spec.get("draft_model"):
        return None
    return spec


def apply(loop) -> None:
    """After a configuration: start, change or end the canary of `loop` (a DraftLoop),
    moving the sequences the candidate held back to the serving draft when it ends."""
    spec = wanted(loop.config)
    engine = loop.engine
    current = engine.spec if isinstance(engine, SplitEngine) else None
    if spec == current:
        return
    if isinstance(engine, SplitEngine):
        for gid in list(engine.on_candidate):
            ctx = list(engine.drafter.ctx[gid])
            engine.candidate.free(gid)
            engine.on_candidate.discard(gid)
            try:
                engine.main.add(gid, ctx, loop.params_of.get(gid))
            except Exception:
                logger.exception(
                    "drafter %s: cannot move %s back; it is dropped", loop.node_id, gid
                )
                loop.drop(gid, loop.attempt_of.get(gid, 0))
        loop.engine = engine = engine.main
        logger.warning("drafter %s: canary ended", loop.node_id)
    if spec is None:
        return
    from inference.worker import engine_cache

    try:
        candidate = engine_cache.load_draft_engine("model", spec["draft_model"])
    except Exception:
        logger.exception(
            "drafter %s: cannot load canary draft %r", loop.node_id, spec["draft_model"]
        )
        return
    loop.engine = SplitEngine(engine, candidate, spec)
    logger.warning(
        "drafter %s: canary of draft v%s on %.0f%% of new sequences",
        loop.node_id,
        spec.get("version"),
        100 * float(spec.get("fraction") or 0),
    )
