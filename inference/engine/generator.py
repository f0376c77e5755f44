"""In-process generation through exactly the split engine APIs, so a distributed run (draft
and verify workers exchanging JSON) reproduces it token for token."""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .counters import SpecCounters
from .engines import DraftEngine, VerifyEngine, check_compatible
from .messages import Draft, SeqId, VerifyResult
from .sampling import SamplingParams


@dataclass
class GenerationOutput:
    seq_id: SeqId
    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    text: str | None = None
    logprobs: list | None = None  # per token (SamplingParams.logprobs), engine.logprobs shapes
    prompt_logprobs: list | None = None
    counters: SpecCounters = field(default_factory=SpecCounters)


def _submission_index(sid: SeqId) -> int:
    """``generate``'s sequence ids are ``g<run>-<i>``: i, the prompt's index."""
    assert isinstance(sid, str)
    return int(sid.rsplit("-", 1)[1])


class SpeculativeGenerator:
    """Runs requests to completion: prefill on the verifier, then rounds of
    propose (draft) -> verify (target) -> commit (draft). Without a draft engine, or with
    k=0, every round is one plain decoding step. ``k`` is an int or a function
    seq_id -> k, asked every round. ``wire=True`` round-trips every message through JSON."""

    _ids = itertools.count()

    def __init__(
        self,
        verify: VerifyEngine,
        draft: DraftEngine | None = None,
        *,
        k: int | Callable[[SeqId], int] = 4,
        wire: bool = False,
    ) -> None:
        if draft is not None:
            check_compatible(draft.info(), verify.info())
        self.verify, self.draft, self.wire = verify, draft, wire
        self.k = k if callable(k) else (lambda _sid, _k=k: _k)

    @property
    def counters(self) -> SpecCounters:
        """Engine-level totals (each batch counted once): rounds and acceptance from the
        verifier, draft steps and time from the drafter. Per-sequence counters live on each
        GenerationOutput; there a step's time counts for every sequence in its batch."""
        total = SpecCounters().merge(self.verify.counters)
        return total.merge(self.draft.counters) if self.draft is not None else total

    def _capacity(self) -> int:
        free = [self.verify.n_free]
        if self.draft is not None and self.draft.n_free is not None:
            free.append(self.draft.n_free)
        return min(free)

    def generate(
        self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]
    ) -> list[GenerationOutput]:
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        run = next(self._ids)
        outs = [GenerationOutput(f"g{run}-{i}", list(p)) for i, p in enumerate(prompts)]
        by_id = {o.seq_id: (o, p) for o, p in zip(outs, params, strict=True)}
        queue = deque(outs)
        active: set[SeqId] = set()
        while queue or active:
            admit = [queue.popleft() for _ in range(min(len(queue), self._capacity()))]
            if admit:
                res = self.verify.add_many(
                    [(o.seq_id, o.prompt_ids, by_id[o.seq_id][1]) for o in admit]
                )
                started: list[tuple[SeqId, list[int], SamplingParams | None]] = []
                for o, r in zip(admit, map(self._roundtrip, res), strict=True):
                    self._apply(o, r)
                    if not r.finished:
                        active.add(o.seq_id)
                        started.append((o.seq_id, o.prompt_ids + o.token_ids, by_id[o.seq_id][1]))
                if self.draft is not None and started:
                    self.draft.add_many(started)
            if not active:
                if queue and not admit:
                    raise RuntimeError("no free slot for a queued request")
                continue
            order = sorted(active, key=_submission_index)
            if self.draft is not None:
                drafts = self.draft.propose([(sid, self.k(sid)) for sid in order])
            else:
                drafts = [Draft(sid, []) for sid in order]
            drafts = [self._roundtrip(d) for d in drafts]
            results = self.verify.verify([(d.seq_id, d.tokens, d.probs) for d in drafts])
            for r in map(self._roundtrip, results):
                o = by_id[r.seq_id][0]
                self._apply(o, r)
                if self.draft is not None and not r.finished:
                    self.draft.commit(r.seq_id, r.tokens, r.n_accepted)
                if r.finished:
                    active.discard(r.seq_id)
        return outs

    def _apply(self, o: GenerationOutput, r: VerifyResult) -> None:
        o.token_ids.extend(r.tokens)
        if r.logprobs is not None:
            o.logprobs = (o.logprobs or []) + r.logprobs
        if r.prompt_logprobs is not None:
            o.prompt_logprobs = r.prompt_logprobs
        if r.finished:
            o.finish_reason, o.stop_reason = r.finish_reason, r.stop_reason
            tok = self.verify.tokenizer
            o.text = tok.decode(o.token_ids) if tok is not None else None
            o.counters.merge(self.verify.free(o.seq_id) or SpecCounters())
            if self.draft is not None:
                o.counters.merge(self.draft.free(o.seq_id) or SpecCounters())

    def _roundtrip(self, msg):
        if not self.wire:
            return msg
        return type(msg).from_json(json.loads(json.dumps(msg.to_json())))


def generate(
    verify: VerifyEngine, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]
) -> list[GenerationOutput]:
    """Plain decoding (k=0) through the same verify path."""
    return SpeculativeGenerator(verify).generate(prompts, params)
