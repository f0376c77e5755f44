"""The split engines. In production they live in different worker processes and exchange
only the JSON-able messages of ``messages``; ``generator`` runs them in one process.

``DraftEngine`` proposes drafts (draft model or n-gram); ``VerifyEngine`` holds the target
model, scores every draft of a batch in ONE forward pass, rejection-samples, rolls back the
target KV of rejected positions and applies stop conditions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from inference.text.tokenizer import Tokenizer

from .counters import SpecCounters
from .drafters import ModelDrafter, NgramDrafter
from .graphs import make_runner
from .kv_cache import CacheFull, CacheOverflow, KVCache
from .logprobs import batch_token_logprobs, prompt_logprobs, token_logprobs
from .messages import Draft, SeqId, VerifyResult, draft_q
from .rejection import rejection_sample
from .sampling import SamplingParams, exp_noise, logits_to_probs, make_generator, sample
from .transformer import Transformer, right_pad


class IncompatibleDrafter(ValueError):
    """Draft and target disagree on what token ids mean."""


class PromptTooLong(CacheOverflow, ValueError):
    pass


def check_compatible(draft_info: dict[str, Any], verify_info: dict[str, Any]) -> None:
    """Raise IncompatibleDrafter unless vocab sizes (where the drafter has one) and tokenizer
    hashes (where both sides have one) agree. Takes ``.info()`` dicts, so it works on JSON."""
    dv, tv = draft_info.get("vocab_size"), verify_info.get("vocab_size")
    if dv is not None and dv != tv:
        raise IncompatibleDrafter(f"draft vocab size {dv} != target vocab size {tv}")
    dh, th = draft_info.get("tokenizer_hash"), verify_info.get("tokenizer_hash")
    if dh and th and dh != th:
        raise IncompatibleDrafter(f"draft tokenizer {dh} != target tokenizer {th}")


def greedy_accept(logits: Tensor, drafts: list[list[int]]) -> tuple[list[int], list[int]]:
    """The exact-match rule for an all-greedy batch, without probabilities: accept draft
    tokens while each equals the target's argmax; the next token is the argmax after the
    accepted prefix. Same result as ``rejection_sample`` on greedy rows, in one op."""
    top = logits.argmax(-1).tolist()  # [B, K+1]
    n_acc, nxt = [], []
    for d, t in zip(drafts, top, strict=True):
        n = 0
        while n < len(d) and d[n] == t[n]:
            n += 1
        n_acc.append(n)
        nxt.append(t[n])
    return n_acc, nxt


class DraftEngine:
    def __init__(self, drafter: ModelDrafter | NgramDrafter, tokenizer: Tokenizer | None = None):
        self.drafter = drafter
        self.tokenizer_hash = tokenizer.hash if tokenizer is not None else None
        self.counters = SpecCounters()
        self.seq_counters: dict[SeqId, SpecCounters] = {}

    @classmethod
    def from_model(
        cls,
        model: Transformer,
        tokenizer: Tokenizer | None = None,
        *,
        n_slots: int = 8,
        max_len: int | None = None,
        static: bool | None = None,
        graphs: bool | None = None,
    ) -> DraftEngine:
        return cls(
            ModelDrafter(model, n_slots=n_slots, max_len=max_len, static=static, graphs=graphs),
            tokenizer,
        )

    @classmethod
    def ngram(cls, min_n: int = 1, max_n: int = 4) -> DraftEngine:
        return cls(NgramDrafter(min_n, max_n))

    def info(self) -> dict[str, Any]:
        kind = "model" if isinstance(self.drafter, ModelDrafter) else "ngram"
        return {
            "kind": kind,
            "vocab_size": self.drafter.vocab_size,
            "tokenizer_hash": self.tokenizer_hash,
        }

    @property
    def n_free(self) -> int | None:
        """Free sequence slots (None: unlimited)."""
        d = self.drafter
        return d.cache.n_free if isinstance(d, ModelDrafter) else None

    def add(
        self, seq_id: SeqId, token_ids: list[int], params: SamplingParams | None = None
    ) -> None:
        """Start drafting for a sequence whose context (prompt + emitted tokens) is token_ids.
        ``params`` (temperature/top-k/top-p/seed) shape the draft distribution; None = greedy."""
        self.add_many([(seq_id, token_ids, params)])

    def add_many(self, items: list[tuple[SeqId, list[int], SamplingParams | None]]) -> None:
        """``add`` for many sequences, prefilled in one batched forward."""
        t0 = time.perf_counter()
        self.drafter.add_many([(sid, list(ids), p) for sid, ids, p in items])
        self.counters.record_prefill(time.perf_counter() - t0, sum(len(ids) for _, ids, _ in items))
        for sid, _, _ in items:
            self.seq_counters[sid] = SpecCounters()

    def propose(self, requests: list[tuple[SeqId, int]]) -> list[Draft]:
        """One draft per (seq_id, k), all sequences batched; k may differ, k=0 -> empty."""
        t0 = time.perf_counter()
        drafts, steps = self.drafter.propose(requests)
        dt = time.perf_counter() - t0
        self.counters.record_draft_step(dt, steps)
        for d in drafts:
            if d.tokens:
                self.seq_counters[d.seq_id].record_draft_step(dt, len(d.tokens))
        return drafts

    def commit(self, seq_id: SeqId, tokens: list[int], n_accepted: int) -> None:
        """Append the verifier's emitted tokens; roll back rejected draft KV."""
        self.drafter.commit(seq_id, list(tokens), n_accepted)

    def free(self, seq_id: SeqId) -> SpecCounters | None:
        self.drafter.free(seq_id)
        return self.seq_counters.pop(seq_id, None)


@dataclass
class _Seq:
    slot: int | None
    params: SamplingParams
    gen: torch.Generator
    prompt_len: int
    generated: list[int] = field(default_factory=list)
    pending: int | None = None  # last emitted token: not yet in the KV cache
    result: VerifyResult | None = None  # set once finished
    counters: SpecCounters = field(default_factory=SpecCounters)


class VerifyEngine:
    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer | None = None,
        *,
        n_slots: int = 8,
        max_len: int | None = None,
        eos_token_ids: list[int] | None = None,
        static: bool | None = None,
        graphs: bool | None = None,
    ) -> None:
        """``static`` (default: on CUDA) runs decoding steps on the static-shape path of
        ``graphs.StaticRunner``, replayed as CUDA graphs when ``graphs`` (default: on CUDA)."""
        self.model, self.tokenizer = model.fuse_weights_(), tokenizer
        self.cache = KVCache.for_model(model, n_slots, max_len)
        self.device = self.cache.k[0].device
        self.runner = make_runner(model, self.cache, static, graphs)
        if eos_token_ids is None:
            eos_token_ids = list(model.config.eos_token_ids)
            if tokenizer is not None and tokenizer.eos_id is not None:
                eos_token_ids.append(tokenizer.eos_id)
        self.eos = set(eos_token_ids)
        self.seqs: dict[SeqId, _Seq] = {}
        self.counters = SpecCounters()

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab_size

    @property
    def n_free(self) -> int:
        return self.cache.n_free

    def kv_stats(self) -> dict[str, int]:
        return self.cache.stats()

    def info(self) -> dict[str, Any]:
        h = self.tokenizer.hash if self.tokenizer is not None else None
        return {"kind": "target", "vocab_size": self.vocab_size, "tokenizer_hash": h}

    def tokens(self, seq_id: SeqId) -> list[int]:
        return list(self.seqs[seq_id].generated)

    # -- prefill ---------------------------------------------------------------------------
    def add(self, seq_id: SeqId, prompt_ids: list[int], params: SamplingParams) -> VerifyResult:
        """Prefill a prompt and emit the first token. Empty prompts are refused (add a BOS
        token yourself if the model wants one); prompts must be shorter than max_len."""
        return self.add_many([(seq_id, prompt_ids, params)])[0]

    @torch.no_grad()
    def add_many(self, items: list[tuple[SeqId, list[int], SamplingParams]]) -> list[VerifyResult]:
        if len({sid for sid, _, _ in items}) < len(items):
            raise ValueError("duplicate sequence ids")
        for sid, prompt, params in items:
            if sid in self.seqs:
                raise ValueError(f"sequence {sid!r} already exists")
            if not prompt:
                raise ValueError("empty prompt: pass at least one token (e.g. BOS)")
            if len(prompt) >= self.cache.max_len:
                raise PromptTooLong(
                    f"prompt of {len(prompt)} tokens does not fit max_len {self.cache.max_len} "
                    "(one position is kept for generation)"
                )
            if max(prompt) >= self.vocab_size or min(prompt) < 0:
                raise ValueError("prompt token id out of the vocabulary")
            if params.stop and self.tokenizer is None:
                raise ValueError("stop strings need a tokenizer")
        # max_tokens 0 with prompt logprobs: prefill only, to score the prompt
        run = [it for it in items if it[2].max_tokens > 0 or it[2].prompt_logprobs is not None]
        if len(run) > self.cache.n_free:
            raise CacheFull(f"{len(run)} sequences, {self.cache.n_free} free slots")
        out: dict[SeqId, VerifyResult] = {}
        for sid, prompt, params in items:
            gen = make_generator(params.seed, self.device)
            s = _Seq(None, params, gen, len(prompt))
            self.seqs[sid] = s
            if params.max_tokens == 0 and params.prompt_logprobs is None:
                s.result = out[sid] = VerifyResult(sid, [], finished=True, finish_reason="length")
        if run:
            t0 = time.perf_counter()
            seqs = [self.seqs[sid] for sid, _, _ in run]
            slots = [self.cache.allocate() for _ in seqs]
            for s, slot in zip(seqs, slots, strict=True):
                s.slot = slot
            x, n = right_pad([p for _, p, _ in run], self.device)
            h = self.model.hidden(x, self.cache, slots, n)
            logits = self.model.logits(
                h[torch.arange(len(run), device=h.device), n.to(h.device) - 1]
            )
            batch_params = [s.params for s in seqs]
            if all(pr.greedy for pr in batch_params):
                first = logits.argmax(-1)
            else:
                probs = logits_to_probs(logits, batch_params)
                first = sample(probs, batch_params, [s.gen for s in seqs])
            dt = time.perf_counter() - t0
            self.counters.record_prefill(dt, int(n.sum()))
            firsts = zip(run, seqs, first.tolist(), strict=True)
            for i, ((sid, prompt, pr), s, t) in enumerate(firsts):
                s.counters.record_prefill(dt, len(prompt))
                if pr.max_tokens == 0:  # scored, not continued
                    r = s.result = VerifyResult(sid, [], finished=True, finish_reason="length")
                    self.cache.free(slots[i])
                    s.slot = None
                else:
                    lp = None
                    if pr.logprobs is not None:
                        lp = token_logprobs(logits[i : i + 1], [t], pr.logprobs)
                    r = self._emit(sid, s, [t], 0, 0, lp)
                if pr.prompt_logprobs is not None:  # only these rows pay for the full head
                    r.prompt_logprobs = prompt_logprobs(
                        self.model.logits, h[i], prompt, pr.prompt_logprobs
                    )
                out[sid] = r
        return [out[sid] for sid, _, _ in items]

    # -- verification ----------------------------------------------------------------------
    @torch.no_grad()
    def verify(self, items: list[tuple[SeqId, list[int], Tensor | None]]) -> list[VerifyResult]:
        """Score the drafts of all sequences in one target forward; rejection-sample.

        Each item is (seq_id, draft_tokens, draft_probs [k, V] float16 or None = one-hot).
        An empty draft is one plain decoding step. Drafts are cut to fit max_len and
        max_tokens (a shorter draft is still a valid draft)."""
        out: dict[SeqId, VerifyResult] = {}
        rows: list[tuple[SeqId, _Seq, list[int], Tensor | None]] = []
        V = self.vocab_size
        for sid, dtoks, dprobs in items:
            s = self.seqs[sid]
            if s.result is not None:
                out[sid] = VerifyResult(
                    sid, [], finished=True, finish_reason=s.result.finish_reason
                )
                continue
            assert s.slot is not None  # a sequence holds its slot until it has a result
            room = self.cache.max_len - self.cache.length(s.slot) - 1
            k = max(0, min(len(dtoks), room, s.params.max_tokens - len(s.generated) - 1))
            if dprobs is not None and (
                dprobs.dim() != 2 or dprobs.shape[-1] != V or len(dprobs) < k
            ):
                raise IncompatibleDrafter(
                    f"draft probabilities of shape {tuple(dprobs.shape)} for vocab {V}"
                )
            if any(not 0 <= t < V for t in dtoks[:k]):
                raise IncompatibleDrafter(f"draft token id out of target vocab {V}")
            rows.append((sid, s, list(dtoks[:k]), None if dprobs is None else dprobs[:k]))
        if rows:
            self._verify_rows(rows, out)
        return [out[sid] for sid, _, _ in items]

    def _verify_rows(self, rows, out: dict[SeqId, VerifyResult]) -> None:
        t0 = time.perf_counter()
        B = len(rows)
        K = max(len(d) for _, _, d, _ in rows)
        n_draft = torch.tensor([len(d) for _, _, d, _ in rows])
        x = torch.tensor([[s.pending] + d + [0] * (K - len(d)) for _, s, d, _ in rows])
        slots = [s.slot for _, s, _, _ in rows]
        start = [self.cache.length(s.slot) for _, s, _, _ in rows]
        if self.runner is not None:
            logits = self.runner.logits(x, slots, (n_draft + 1).tolist())
        else:
            logits = self.model(x.to(self.device), self.cache, slots, n_draft + 1)  # [B, K+1, V]
        params = [s.params for _, s, _, _ in rows]
        if all(pr.greedy for pr in params):
            n_acc, nxt = greedy_accept(logits, [d for _, _, d, _ in rows])
        else:
            n_acc, nxt = self._rejection(logits, rows, params, x, n_draft)
        lps: dict[int, list] = {}
        ask = [i for i, (_, s, _, _) in enumerate(rows) if s.params.logprobs is not None]
        if ask:  # only the rows that asked: no cost otherwise; row j scored emitted token j
            emitted = [rows[i][2][: n_acc[i]] + [nxt[i]] for i in ask]
            tops = [rows[i][1].params.logprobs for i in ask]
            picked = logits[torch.tensor(ask, device=logits.device)]
            lps = dict(zip(ask, batch_token_logprobs(picked, emitted, tops), strict=True))
        dt = time.perf_counter() - t0
        self.counters.record_verify_step(dt, B)
        for i, (sid, s, d, _) in enumerate(rows):
            self.cache.rollback(s.slot, start[i] + 1 + n_acc[i])  # pending + accepted
            s.counters.record_verify_step(dt, B)
            toks = d[: n_acc[i]] + [nxt[i]]
            out[sid] = self._emit(sid, s, toks, n_acc[i], len(d), lps.get(i))

    def _rejection(
        self, logits: Tensor, rows, params, x: Tensor, n_draft: Tensor
    ) -> tuple[list[int], list[int]]:
        B, dev, V = len(rows), self.device, self.vocab_size
        K = logits.shape[1] - 1
        p = logits_to_probs(logits, params)
        q = None
        if any(dp is not None for *_, dp in rows):
            q = torch.zeros(B, K, V, device=dev)
            for i, (*_, dp) in enumerate(rows):
                if dp is not None and len(dp):
                    q[i, : len(dp)] = draft_q(dp.to(dev))
        uniform = torch.zeros(B, K, device=dev)
        noise = torch.ones(B, V, device=dev)
        for i, (_, s, d, _) in enumerate(rows):  # fixed draws per sequence: batch invariant
            if not s.params.greedy:
                uniform[i, : len(d)] = torch.rand(len(d), device=dev, generator=s.gen)
                noise[i] = exp_noise([s.gen], V, dev)[0]
        greedy = torch.tensor([pr.greedy for pr in params], device=dev)
        d = x[:, 1:].to(dev)
        n_acc, nxt = rejection_sample(p, d, n_draft.to(dev), q, greedy, uniform, noise)
        return n_acc.tolist(), nxt.tolist()

    # -- stop conditions -------------------------------------------------------------------
    def _emit(
        self,
        sid: SeqId,
        s: _Seq,
        tokens: list[int],
        n_acc: int,
        n_draft: int,
        logprobs: list | None = None,
    ) -> VerifyResult:
        r = VerifyResult(sid, [], n_accepted=n_acc, n_drafted=n_draft)
        for t in tokens:
            r.tokens.append(t)
            s.generated.append(t)
            if (t in self.eos and not s.params.ignore_eos) or t in s.params.stop_token_ids:
                r.finish_reason, r.stop_reason = "stop", t
            elif (hit := self._stop_string(s)) is not None:
                r.finish_reason, r.stop_reason = "stop", hit
            elif len(s.generated) >= s.params.max_tokens:
                r.finish_reason = "length"
            elif s.prompt_len + len(s.generated) >= self.cache.max_len:
                r.finish_reason = "length"  # like vLLM's max_model_len: prompt + output
            if r.finish_reason:
                break
        s.pending = r.tokens[-1]
        if logprobs is not None:
            r.logprobs = logprobs[: len(r.tokens)]  # a stop may have cut the tokens
        for c in (s.counters, self.counters):
            c.record_round(n_draft, n_acc, len(r.tokens))
        if r.finish_reason:
            r.finished, s.result = True, r
            assert s.slot is not None  # a sequence holds its slot until it has a result
            self.cache.free(s.slot)
            s.slot = None
        return r

    def _stop_string(self, s: _Seq) -> str | None:
        if not s.params.stop:
            return None
        longest = max(map(len, s.params.stop))
        assert self.tokenizer is not None  # add() refuses stop strings without a tokenizer
        tail = self.tokenizer.decode(s.generated[-(longest + 8) :])  # cheap: a short tail
        return next((stop for stop in s.params.stop if stop in tail), None)

    def free(self, seq_id: SeqId) -> SpecCounters | None:
        """Forget a sequence (finished or not); returns its counters."""
        s = self.seqs.pop(seq_id, None)
        if s is None:
            return None
        if s.slot is not None:
            self.cache.free(s.slot)
        return s.counters
