"""Timing the benchmark's cases: our engine and Hugging Face ``generate()`` run by run,
repetitions interleaved in rotating order, and the figures derived from a speculative case
against its plain baseline (alpha, c, the ideal speedup, efficiency, the time per round)."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

import torch

from inference.engine.counters import SpecCounters
from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator
from inference.engine.sampling import SamplingParams

from .spec_arithmetic import alpha_from_positions, ideal_speedup, median


@dataclass
class Run:
    seconds: float
    tokens: int
    outputs: list[list[int]]
    counters: SpecCounters | None = None

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens/s of the decoding phase: prompt prefills (timed inside the engines) and
        the first token of each sequence, which a prefill emits, left out. That is the phase
        the ideal-speedup formula models."""
        c = self.counters
        if c is None:
            return float("nan")
        return (self.tokens - len(self.outputs)) / (self.seconds - c.prefill_time_s)


@dataclass
class CaseResult:
    name: str
    runs: list[Run] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return median([r.seconds for r in self.runs])

    @property
    def tokens_per_s(self) -> float:
        return median([r.tokens / r.seconds for r in self.runs])

    @property
    def decode_tokens_per_s(self) -> float:
        return median([r.decode_tokens_per_s for r in self.runs])

    @property
    def counters(self) -> SpecCounters:
        c = SpecCounters()
        for r in self.runs:
            if r.counters is not None:
                c.merge(r.counters)
        return c

    def step_time(self, kind: str) -> float:
        """Median over runs of the engine-timed seconds per draft or verify step."""
        xs = []
        for r in self.runs:
            c = r.counters
            if c is None:
                continue
            if kind == "draft" and c.num_draft_steps:
                xs.append(c.draft_time_s / c.num_draft_steps)
            if kind == "verify" and c.num_verify_steps:
                xs.append(c.verify_time_s / c.num_verify_steps)
        return median(xs)


def interleaved(
    cases: dict[str, Callable[[int], Run]], reps: int, log: Callable[[str], None]
) -> dict[str, CaseResult]:
    """Run every case once per repetition, rotating the order each repetition. A case
    receives the repetition index (it picks its prompt with it). Rep -1 is a warm-up."""
    names = list(cases)
    for n in names:
        cases[n](-1)
    res = {n: CaseResult(n) for n in names}
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for n in order:
            res[n].runs.append(cases[n](rep))
        log(
            f"  rep {rep + 1}/{reps}: "
            + ", ".join(
                f"{n} {res[n].runs[-1].tokens / res[n].runs[-1].seconds:.1f} tok/s" for n in names
            )
        )
    return res


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)


def counters_delta(after: SpecCounters, before: SpecCounters) -> SpecCounters:
    """``after - before`` for engine-level (cumulative) counters."""
    d = SpecCounters()
    for name in SpecCounters.__dataclass_fields__:
        a, b = getattr(after, name), getattr(before, name)
        if isinstance(a, list):
            b = list(b) + [0] * (len(a) - len(b))
            setattr(d, name, [x - y for x, y in zip(a, b, strict=False)])
        elif isinstance(a, dict):
            setattr(d, name, {kk: v - b.get(kk, 0) for kk, v in a.items() if v - b.get(kk, 0)})
        else:
            setattr(d, name, a - b)
    return d


def ours_case(verify: VerifyEngine, draft: DraftEngine | None, k: int, prompts, n_new: int):
    """prompts(rep) -> list of prompts (a batch); one generate() call per run."""

    def run(rep: int) -> Run:
        batch = prompts(rep)
        n = n_new if rep >= 0 else min(n_new, 8)
        gen = SpeculativeGenerator(verify, draft if k > 0 else None, k=k)
        before = gen.counters  # engine-level totals: this run is the difference
        t0 = time.perf_counter()
        outs = gen.generate(batch, _greedy(n))
        dt = time.perf_counter() - t0
        delta = counters_delta(gen.counters, before)
        return Run(dt, sum(len(o.token_ids) for o in outs), [o.token_ids for o in outs], delta)

    return run


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _hf_gen_config(model, n: int, **extra):
    gc = copy.deepcopy(model.generation_config)
    gc.max_new_tokens, gc.min_new_tokens, gc.do_sample = n, None, False
    gc.eos_token_id = None  # as ignore_eos: always n tokens
    gc.temperature = gc.top_p = gc.top_k = None
    gc.pad_token_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    for k, v in extra.items():
        setattr(gc, k, v)
    return gc


def hf_case(
    model, prompts, n_new: int, *, assistant=None, k: int = 0, lookup: int = 0, ngram: int = 4
):
    if assistant is not None:
        agc = assistant.generation_config
        agc.num_assistant_tokens = k
        agc.num_assistant_tokens_schedule = "constant"
        agc.assistant_confidence_threshold = 0.0

    def run(rep: int) -> Run:
        (prompt,) = prompts(rep)  # assisted generation and prompt lookup are batch-1 only
        n = n_new if rep >= 0 else min(n_new, 8)
        extra: dict[str, Any] = {}
        if lookup:
            extra = {"prompt_lookup_num_tokens": lookup, "max_matching_ngram_size": ngram}
        gc = _hf_gen_config(model, n, **extra)
        x = torch.tensor([prompt], device=model.device)
        kw = {"assistant_model": assistant} if assistant is not None else {}
        with torch.inference_mode():
            _sync(model.device)
            t0 = time.perf_counter()
            out = model.generate(
                input_ids=x, attention_mask=torch.ones_like(x), generation_config=gc, **kw
            )
            _sync(model.device)
            dt = time.perf_counter() - t0
        toks = out[0, x.shape[1] :].tolist()
        return Run(dt, len(toks), [toks])

    return run


@torch.inference_mode()
def raw_forward_ms(model, T: int, context: int, n: int = 30) -> float:
    """Median ms of one bare ``model`` forward of T new tokens on a cached context of
    ``context`` tokens (batch 1): the model's share of a step, without the engine."""
    from inference.engine.kv_cache import KVCache

    cache = KVCache.for_model(model, 1, context + T + 1)
    slot = cache.allocate()
    slots = [slot]
    dev = cache.k[0].device
    model(torch.zeros(1, context, dtype=torch.long, device=dev), cache, slots)
    x = torch.zeros(1, T, dtype=torch.long, device=dev)
    ts = []
    for _ in range(n + 3):
        t0 = time.perf_counter()
        model(x, cache, slots)[:, -1].argmax(-1).item()
        ts.append(time.perf_counter() - t0)
        cache.rollback(slot, context)
    return 1e3 * median(ts[3:])


def time_breakdown(spec: CaseResult) -> dict[str, float]:
    """Where a speculative run's time goes, per verification round (ms): drafting and
    verification as timed inside the engines, the rest (generator loop, commits, messages)
    by difference."""
    wall = sum(r.seconds for r in spec.runs)
    c = spec.counters
    rounds = max(1, c.num_verify_steps)
    other = wall - c.draft_time_s - c.verify_time_s - c.prefill_time_s
    return {
        "rounds": rounds,
        "round_ms": 1e3 * wall / rounds,
        "draft_ms_per_round": 1e3 * c.draft_time_s / rounds,
        "verify_ms_per_round": 1e3 * c.verify_time_s / rounds,
        "prefill_ms_per_round": 1e3 * c.prefill_time_s / rounds,
        "other_ms_per_round": 1e3 * other / rounds,
    }


class SpecSummary(TypedDict):
    alpha: float
    acceptance_rate: float
    mean_acceptance_length: float
    per_position_acceptance: list[float]
    draft_step_ms: float
    target_step_ms: float
    verify_step_ms: float
    c: float
    ideal_speedup: float
    speedup_vs_plain: float
    decode_speedup_vs_plain: float
    efficiency: float
    efficiency_end_to_end: float


def spec_summary(spec: CaseResult, plain: CaseResult, k: int) -> SpecSummary:
    c_ = spec.counters
    alpha = alpha_from_positions(c_.num_accepted_tokens_per_pos, c_.num_draft_tokens_per_pos)
    t_draft, t_target = spec.step_time("draft"), plain.step_time("verify")
    c = t_draft / t_target if t_target and t_draft == t_draft else 0.0
    ideal = ideal_speedup(alpha, k, c)
    speedup = spec.tokens_per_s / plain.tokens_per_s
    decode = spec.decode_tokens_per_s / plain.decode_tokens_per_s
    return {
        "alpha": alpha,
        "acceptance_rate": c_.acceptance_rate,
        "mean_acceptance_length": c_.mean_acceptance_length,
        "per_position_acceptance": c_.acceptance_rate_per_pos,
        "draft_step_ms": t_draft * 1e3,
        "target_step_ms": t_target * 1e3,
        "verify_step_ms": spec.step_time("verify") * 1e3,
        "c": c,
        "ideal_speedup": ideal,
        "speedup_vs_plain": speedup,
        "decode_speedup_vs_plain": decode,
        # the formula models decoding steps only, so it is compared with the decoding phase;
        # end to end, the prompt prefill (the same cost on both sides) dilutes the speedup
        "efficiency": decode / ideal if ideal else 0.0,
        "efficiency_end_to_end": speedup / ideal if ideal else 0.0,
    }
