"""Drafters: a draft model with its own KV cache, and n-gram prompt lookup.

Both keep each sequence's committed context (prompt + every emitted token). The model
drafter keeps all but the last 1+ context tokens in its cache ("pending" tokens are fed at
the next proposal), so after a verification it only rolls its cache back to the longest
prefix the target kept: rejected draft KV disappears by lowering a length.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .graphs import make_runner
from .kv_cache import CacheFull, KVCache
from .messages import Draft, SeqId, draft_q, to_wire
from .sampling import SamplingParams, derive_seed, exp_noise, logits_to_probs, make_generator
from .transformer import Transformer, right_pad

GREEDY = SamplingParams(temperature=0.0)


class NgramDrafter:
    """Prompt lookup: find the latest earlier occurrence of the context's last n tokens
    (n from max_n down to min_n) and propose what followed it. q is one-hot."""

    vocab_size = None

    def __init__(self, min_n: int = 1, max_n: int = 4) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.ctx: dict[SeqId, list[int]] = {}

    def add_many(self, items: list[tuple[SeqId, list[int], SamplingParams | None]]) -> None:
        for sid, ids, _ in items:
            self.ctx[sid] = list(ids)

    def lookup(self, ctx: list[int], k: int) -> list[int]:
        a = np.asarray(ctx)
        for n in range(min(self.max_n, len(a) - 1), self.min_n - 1, -1):
            win = np.lib.stride_tricks.sliding_window_view(a[:-1], n)  # excludes the suffix
            hits = np.flatnonzero((win == a[-n:]).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n
                return a[start : start + k].tolist()
        return []

    def propose(self, requests: list[tuple[SeqId, int]]) -> tuple[list[Draft], int]:
        return [Draft(s, self.lookup(self.ctx[s], k) if k > 0 else []) for s, k in requests], 0

    def commit(self, seq_id: SeqId, tokens: list[int], n_accepted: int) -> None:
        self.ctx[seq_id].extend(tokens)

    def free(self, seq_id: SeqId) -> None:
        self.ctx.pop(seq_id, None)


@dataclass
class _Seq:
    slot: int
    ctx: list[int]
    params: SamplingParams
    gen: torch.Generator
    drafted: list[int] = field(default_factory=list)  # this round's draft tokens
    probs: list[torch.Tensor] = field(default_factory=list)  # their float16 q rows


class ModelDrafter:
    """A draft model drafting all requested sequences in one batched forward per position.

    Draft tokens are sampled with the request's own temperature/top-k/top-p (greedy requests
    draft greedily and send no probabilities). A draft with a reduced head (FR-Spec: logits
    over ``model.vocab_ids`` only) samples among those tokens and sends its q scattered into
    the full vocabulary, zero elsewhere: the rejection sampler then sees the distribution the
    token really came from, so verification stays exact."""

    def __init__(
        self,
        model: Transformer,
        *,
        n_slots: int = 8,
        max_len: int | None = None,
        static: bool | None = None,
        graphs: bool | None = None,
    ):
        self.model = model.fuse_weights_()
        self.cache = KVCache.for_model(model, n_slots, max_len)
        self.device = self.cache.k[0].device
        self.runner = make_runner(model, self.cache, static, graphs)  # see VerifyEngine
        # a reduced head's token ids (None: a full head)
        self.vocab_ids = model.vocab_ids
        self.seqs: dict[SeqId, _Seq] = {}

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab_size

    @torch.no_grad()
    def add_many(self, items: list[tuple[SeqId, list[int], SamplingParams | None]]) -> None:
        """Start sequences; their contexts (all but the last token) prefill in one forward."""
        for sid, ids, _ in items:
            if sid in self.seqs:
                raise ValueError(f"sequence {sid!r} already exists")
            if not ids:
                raise ValueError("a draft context needs at least one token")
        if len(items) > self.cache.n_free:
            raise CacheFull(f"{len(items)} sequences, {self.cache.n_free} free draft slots")
        for sid, ids, params in items:
            params = params or GREEDY
            gen = make_generator(derive_seed(params.seed, 1), self.device)
            self.seqs[sid] = _Seq(self.cache.allocate(), list(ids), params, gen)
        # a context longer than the draft cache is not drafted for (k=0: plain decoding)
        pre = [
            (self.seqs[sid].slot, ids[:-1])
            for sid, ids, _ in items
            if 1 < len(ids) <= self.cache.max_len
        ]
        if pre:
            x, n = right_pad([p for _, p in pre], self.device)
            self.model.hidden(x, self.cache, [s for s, _ in pre], n)

    @torch.no_grad()
    def propose(self, requests: list[tuple[SeqId, int]]) -> tuple[list[Draft], int]:
        """Drafts for each (seq_id, k); returns them and the number of forward passes."""
        ks = {}
        for sid, k in requests:
            s = self.seqs[sid]
            s.drafted, s.probs = [], []
            ks[sid] = max(0, min(k, self.cache.max_len - len(s.ctx) + 1))  # 0 once it is full
        steps = 0
        for j in range(max(ks.values(), default=0)):
            rows = [self.seqs[sid] for sid, k in ks.items() if k > j]
            if j == 0:
                feed = [s.ctx[self.cache.length(s.slot) :] for s in rows]
            else:
                feed = [s.drafted[-1:] for s in rows]
            slots = [s.slot for s in rows]
            if self.runner is not None:
                x, n = right_pad(feed)
                logits = self.runner.logits(x, slots, n.tolist())
                last = n.to(self.device) - 1
                self._sample(rows, logits[torch.arange(len(rows), device=self.device), last])
                steps += 1
                continue
            x, n = right_pad(feed, self.device)
            h = self.model.hidden(x, self.cache, slots, n)
            if all(len(f) == x.shape[1] for f in feed):  # no padding: the last column
                h = h[:, -1]
            else:
                h = h[torch.arange(len(rows), device=h.device), n.to(h.device) - 1]
            self._sample(rows, self.model.logits(h))
            steps += 1
        out = []
        for sid, k in ks.items():
            s = self.seqs[sid]
            probs = torch.stack(s.probs) if s.probs and k else None
            out.append(Draft(sid, list(s.drafted), probs))
        return out, steps

    def _sample(self, rows: list[_Seq], logits: torch.Tensor) -> None:
        params = [s.params for s in rows]
        ids = self.vocab_ids
        if all(p.greedy for p in params):  # no probabilities to send
            top = logits.argmax(-1)
            for s, t in zip(rows, (top if ids is None else ids[top]).tolist(), strict=True):
                s.drafted.append(t)
            return
        probs = logits_to_probs(logits, params)  # [B, V] or [B, draft vocab]
        tokens = probs.argmax(-1)
        sampled = [i for i, p in enumerate(params) if not p.greedy]
        if sampled:
            q16 = to_wire(probs[sampled])
            noise = exp_noise([rows[i].gen for i in sampled], probs.shape[-1], probs.device)
            tokens[sampled] = (draft_q(q16) / noise).argmax(-1)
            if ids is not None:  # the full-vocabulary q: zero outside the draft's vocabulary
                full = q16.new_zeros(len(sampled), self.vocab_size)
                q16 = full.index_copy_(1, ids, q16)
            for i, q in zip(sampled, q16, strict=True):
                rows[i].probs.append(q)
        if ids is not None:
            tokens = ids[tokens]
        for s, t in zip(rows, tokens.tolist(), strict=True):
            s.drafted.append(t)

    def commit(self, seq_id: SeqId, tokens: list[int], n_accepted: int) -> None:
        """Append the verifier's emitted tokens; keep draft KV only for the accepted prefix."""
        s = self.seqs[seq_id]
        old, cached = len(s.ctx), s.drafted[: max(len(s.drafted) - 1, 0)]  # d_1..d_{k-1}
        m = 0
        while m < min(n_accepted, len(cached), len(tokens)) and cached[m] == tokens[m]:
            m += 1
        s.ctx.extend(tokens)
        keep = min(old + m, self.cache.length(s.slot), len(s.ctx) - 1)
        self.cache.rollback(s.slot, keep)
        s.drafted, s.probs = [], []

    def free(self, seq_id: SeqId) -> None:
        s = self.seqs.pop(seq_id, None)
        if s is not None:
            self.cache.free(s.slot)
