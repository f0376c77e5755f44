"""The performance and cost model of a speculative-decoding pipeline. Pure Python.

A round of one sequence: the drafter runs k draft steps, the verifier scores the k draft
tokens (plus the pending one) in one forward pass, and E(k) tokens come out on average:

    E(k) = 1 + sum_{i=1..k} P(first i drafts accepted)
         = (1 - alpha^(k+1)) / (1 - alpha)           for a scalar alpha

Step times come from measured curves when there are any (t(n) = a + x*n, fitted by least
squares to telemetry: n is the batch size of a draft step, the number of tokens scored by a
verify step), else from the roofline of the hardware profile: a decode step costs at least
max(bytes moved / memory bandwidth, flops / peak compute).

A pipeline with V verifiers and D drafters, each verifier running batches of b sequences:
drafters serve b*V/D sequences each, so

    round(b, k)  = k * t_draft(b*V/D) + t_verify(b*(k+1)) + rest(b, k)
    goodput      = V * b * E(k) / round               tokens/s
    ITL          = round / E(k)                        s per token per sequence
    power        = sum over nodes of idle + (tdp - idle) * utilization
    tokens/J     = goodput / power

With k = 0 a round is one plain decoding step on the verifier (no drafter time).
Every figure this module produces is *modeled*.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from fleet.planner.costs import StepCosts, bucket
from fleet.planner.fitting import Curve, fit_linear, fit_linear2  # noqa: F401  (re-exported)

HOURS_PER_YEAR = 24 * 365


# --- acceptance ------------------------------------------------------------------------------


def expected_tokens(
    k: int, alpha: float | None = None, per_position: Sequence[float] | None = None
) -> float:
    """Expected tokens per verification round (accepted drafts + the bonus/correction token).

    `per_position[i]`: measured probability that draft position i (0-based) is accepted,
    i.e. the first i+1 drafts all accepted (accepted at i / drafts). Positions beyond the
    measured ones are extrapolated with the alpha of the last two. Else scalar `alpha`:
    E = (1 - alpha^(k+1)) / (1 - alpha)."""
    if k <= 0:
        return 1.0
    if per_position:
        probs = [min(max(float(p), 0.0), 1.0) for p in per_position]
        # cumulative probabilities cannot grow with the position
        for i in range(1, len(probs)):
            probs[i] = min(probs[i], probs[i - 1])
        if len(probs) < k:
            ratio = alpha if alpha is not None else _tail_ratio(probs)
            while len(probs) < k:
                probs.append(probs[-1] * ratio)
        return 1.0 + sum(probs[:k])
    if alpha is None:
        raise ValueError("give alpha or per_position")
    a = min(max(float(alpha), 0.0), 1.0)
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def _tail_ratio(probs: Sequence[float]) -> float:
    if len(probs) >= 2 and probs[-2] > 0:
        return min(probs[-1] / probs[-2], 1.0)
    return probs[0] if probs else 0.0


def alpha_from_per_position(per_position: Sequence[float]) -> float:
    """Pooled ratio of consecutive cumulative acceptances (the telemetry's estimator)."""
    probs = [float(p) for p in per_position]
    if not probs:
        return 0.0
    num = sum(probs)
    den = 1.0 + sum(probs[:-1])
    return min(num / den, 1.0) if den > 0 else 0.0


# --- hardware and models ---------------------------------------------------------------------


class UnusableProfile(ValueError):
    """A hardware profile the roofline cannot use."""


@dataclass(frozen=True)
class Hardware:
    slug: str
    memory_bandwidth_gbs: float
    peak_bf16_tflops: float
    tdp_w: float
    idle_w: float
    memory_gb: float = 0.0
    usd_per_hour: float | None = None
    kind: str = "gpu"
    # Achievable fraction of peak bandwidth / compute (roofline efficiency).
    bw_efficiency: float = 0.8
    compute_efficiency: float = 0.6
    step_overhead_s: float = 20e-6  # launch/sync cost of one step

    @classmethod
    def from_profile(cls, profile) -> Hardware:
        """Raises UnusableProfile when a figure the roofline divides by is zero, negative or
        not a number (a row written before those were refused)."""
        for name in ("memory_bandwidth_gbs", "peak_bf16_tflops"):
            value = getattr(profile, name, None)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise UnusableProfile(
                    f"hardware profile {profile.slug!r} has no usable {name} ({value!r}): "
                    "set it to the device's figure to model it"
                )
        return cls(
            slug=profile.slug,
            memory_bandwidth_gbs=profile.memory_bandwidth_gbs,
            peak_bf16_tflops=profile.peak_bf16_tflops,
            tdp_w=profile.tdp_w,
            idle_w=profile.idle_w,
            memory_gb=profile.memory_gb,
            usd_per_hour=cost_per_hour(profile.usd_per_hour, profile.list_price_usd),
            kind=profile.kind,
        )


def cost_per_hour(
    usd_per_hour: float | None, list_price_usd: float | None, years: float = 3.0
) -> float | None:
    """Hourly price, or the list price amortized over `years`; None when neither is known."""
    if usd_per_hour is not None:
        return float(usd_per_hour)
    if list_price_usd is not None:
        return float(list_price_usd) / (years * HOURS_PER_YEAR)
    return None


@dataclass(frozen=True)
class ModelSpec:
    """What the roofline needs about a model."""

    name: str
    params: float  # parameter count
    n_layers: int = 32
    kv_dim: int = 1024  # num_kv_heads * head_dim
    bytes_per_param: float = 2.0
    context: int = 1024  # mean tokens of context held per sequence

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.n_layers * self.kv_dim * self.bytes_per_param


def roofline_step_s(hw: Hardware, model: ModelSpec, *, batch: float, tokens: float) -> float:
    """One forward step over `batch` sequences scoring `tokens` tokens in all: weights read
    once, each sequence's KV read once; 2 flops per parameter per token."""
    bytes_moved = model.weight_bytes + batch * model.context * model.kv_bytes_per_token
    flops = (
        2.0 * model.params * tokens + 4.0 * tokens * model.context * model.kv_dim * model.n_layers
    )
    t_mem = bytes_moved / (hw.memory_bandwidth_gbs * 1e9 * hw.bw_efficiency)
    t_compute = flops / (hw.peak_bf16_tflops * 1e12 * hw.compute_efficiency)
    return max(t_mem, t_compute) + hw.step_overhead_s


def _capacity(hw: Hardware, model: ModelSpec, t: float, hi: float) -> float:
    """Largest batch one `hw` drafts within step time `t` (0 if not even one sequence)."""
    if roofline_step_s(hw, model, batch=1, tokens=1) > t:
        return 0.0
    lo = 1.0
    if roofline_step_s(hw, model, batch=hi, tokens=hi) <= t:
        return hi
    for _ in range(40):
        mid = (lo + hi) / 2
        if roofline_step_s(hw, model, batch=mid, tokens=mid) <= t:
            lo = mid
        else:
            hi = mid
    return lo


def mixed_step_s(mix, model: ModelSpec, total: float) -> float:
    """Step time of a heterogeneous pool drafting `total` sequences, load balanced so all
    finish together: the least t with sum_c n_c * capacity_c(t) >= total."""
    total = max(total, 1.0)
    lo = min(roofline_step_s(hw, model, batch=1, tokens=1) for hw, _ in mix)
    hi = max(roofline_step_s(hw, model, batch=total, tokens=total) for hw, _ in mix)
    for _ in range(50):
        mid = (lo + hi) / 2
        if sum(n * _capacity(hw, model, mid, total) for hw, n in mix) >= total:
            hi = mid
        else:
            lo = mid
    return hi


# --- the pipeline model ----------------------------------------------------------------------


@dataclass(frozen=True)
class PipelineModel:
    """Inputs of a prediction. Measured curves win over the roofline where given."""

    alpha: float | None = 0.7
    per_position: tuple[float, ...] = ()
    verifier: Hardware | None = None
    drafter: Hardware | None = None
    target: ModelSpec | None = None
    draft: ModelSpec | None = None
    verify_curve: Curve | None = None  # t(tokens scored, batch)
    plain_curve: Curve | None = (
        None  # t(batch) of a plain decoding step (no draft), if measured apart
    )
    draft_curve: Curve | None = None  # t(batch)
    n_verifiers: int = 1
    n_drafters: float = 1  # fractional in one drafter's view (fleet.planner.adaptive)
    hop_s: float = 0.0  # network/broker time per round (both directions)
    prompt_tokens: int = 256
    drafter_kind: str = "model"  # model | ngram | none
    ngram_step_s: float = 50e-6
    # Heterogeneous drafter pool: ((hardware, count), ...). The router spreads sequences so
    # every drafter finishes its step at about the same time (faster ones take more).
    drafter_mix: tuple = ()
    # Per-round bookkeeping outside the forward passes (sampling, messages), t(batch).
    overhead_curve: Curve | None = None
    # Step costs measured by the workers (`fleet.planner.costs.StepCosts`): the verifier's
    # forward by (batch, tokens per sequence), the drafter's k draft steps by (batch, k).
    # They win over the curves and the roofline where present.
    verify_costs: StepCosts | None = None
    draft_costs: StepCosts | None = None
    # The rest of a round (messages, gathering, emitting) by (batch, k), measured by the
    # drafter from its round periods (`fleet.planner.adaptive`); `hop_s` where it has none.
    rest_costs: StepCosts | None = None
    # The roofline's verify step times this: measured / roofline at the measured point
    # (one operating point gives a level, not a slope).
    verify_scale: float = 1.0
    # What the running pipeline's rounds realized against this model's prediction, by
    # (batch bucket, k): the drafter's adaptive k calibration (`fleet.planner.adaptive`),
    # published with its costs. A prediction for a measured (bucket, k) is scaled by it.
    calibration: dict[tuple[int, int], float] | None = None

    def with_(self, **changes) -> PipelineModel:
        return replace(self, **changes)

    # step times ----------------------------------------------------------------------------
    def t_verify(self, batch: float, tokens: float) -> float:
        if self.verify_costs is not None:
            t = self.verify_costs.estimate(batch, max(1, round(tokens / max(batch, 1))))
            if t is not None:
                return t
        if self.plain_curve is not None and tokens <= batch:
            return self.plain_curve(batch)
        if self.verify_curve is not None:
            return self.verify_curve(tokens, batch)
        if self.verifier is None or self.target is None:
            raise ValueError("no verify curve and no verifier hardware/target model")
        return self.verify_scale * roofline_step_s(
            self.verifier, self.target, batch=batch, tokens=tokens
        )

    def t_draft(self, batch: float) -> float:
        if self.drafter_kind == "ngram":
            return self.ngram_step_s
        if self.draft_curve is not None:
            return self.draft_curve(batch)
        if self.draft is not None and len(self.drafter_mix) > 1:
            return mixed_step_s(
                self.drafter_mix, self.draft, batch * sum(n for _, n in self.drafter_mix)
            )
        if self.drafter is None or self.draft is None:
            raise ValueError("no draft curve and no drafter hardware/draft model")
        return roofline_step_s(self.drafter, self.draft, batch=batch, tokens=batch)

    def draft_round_s(self, batch: float, k: float) -> float:
        """Drafting k tokens for each of `batch` sequences (k draft steps)."""
        if k <= 0:
            return 0.0
        if self.draft_costs is not None and self.drafter_kind != "none":
            t = self.draft_costs.estimate(batch, round(k))
            if t is not None:
                return t
        return k * self.t_draft(batch)

    def rest_s(self, batch: float, k: float) -> float:
        """A round's time outside its forward passes at `batch` and draft length `k`: the
        measured cell, else the nearest k measured at this batch (it moves little with k),
        else the table's estimate, else the hop."""
        if self.rest_costs is not None and len(self.rest_costs):
            b, kk = bucket(batch), round(k)
            here = [t for bb, t in self.rest_costs.cells if bb == b]
            near = min(here, key=lambda t: (abs(t - kk), t)) if here else None
            t = (
                self.rest_costs.measured(b, near)
                if near is not None
                else self.rest_costs.estimate(batch, kk)
            )
            if t is not None:
                return t
        return self.hop_s

    def drafter_power(self, util: float) -> float:
        if len(self.drafter_mix) > 1:
            return sum(n * _power(hw, util) for hw, n in self.drafter_mix)
        return self.n_drafters * _power(self.drafter, util)

    def E(self, k: int) -> float:
        return expected_tokens(k, self.alpha, self.per_position or None)


@dataclass(frozen=True)
class Prediction:
    k: int
    batch: float
    goodput_tps: float  # tokens/s of the whole pipeline
    itl_s: float
    ttft_s: float
    round_s: float
    expected_tokens: float
    power_w: float
    tokens_per_j: float
    draft_util: float
    verify_util: float
    modeled: bool = True
    sources: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "k": self.k,
            "batch": round(self.batch, 2),
            "goodput_tps": round(self.goodput_tps, 3),
            "itl_ms": round(self.itl_s * 1000, 4),
            "ttft_ms": round(self.ttft_s * 1000, 3),
            "round_ms": round(self.round_s * 1000, 4),
            "expected_tokens": round(self.expected_tokens, 4),
            "power_w": round(self.power_w, 2),
            "tokens_per_j": round(self.tokens_per_j, 5),
            "draft_util": round(self.draft_util, 4),
            "verify_util": round(self.verify_util, 4),
            "modeled": True,
            "sources": self.sources,
        }


def _power(hw: Hardware | None, util: float) -> float:
    if hw is None:
        return 0.0
    return hw.idle_w + (hw.tdp_w - hw.idle_w) * min(max(util, 0.0), 1.0)


@dataclass(frozen=True)
class Round:
    """One round at verify batch b: the k actually drafted, its parts and goodput."""

    k: int
    batch: float
    t_verify: float
    draft_time: float
    round_s: float
    expected_tokens: float
    goodput_tps: float


def round_of(m: PipelineModel, *, k: int, batch: float) -> Round:
    """E[tokens per round] / round time: the goodput model itself (what the drafter's adaptive
    k evaluates every round; `predict` adds latency, power and cost around it)."""
    V = max(m.n_verifiers, 0)
    D = max(m.n_drafters, 0)
    b = max(batch, 1)  # sequences per verifier; a measured mean batch may be fractional
    use_draft = k > 0 and m.drafter_kind != "none" and (D > 0 or m.drafter_kind == "ngram")
    k = k if use_draft else 0
    draft_batch = b * V / D if (D > 0 and m.drafter_kind == "model") else b
    t_v = m.t_verify(b, b * (k + 1))
    draft_time = m.draft_round_s(draft_batch, k)
    overhead = m.overhead_curve(b * (k + 1), b) if m.overhead_curve is not None else 0.0
    round_s = draft_time + t_v + m.rest_s(b, k) + overhead
    E = m.E(k)
    goodput = V * b * E / round_s if (V > 0 and round_s > 0) else 0.0
    if m.calibration:
        goodput *= m.calibration.get((bucket(b), k), 1.0)
    return Round(k, b, t_v, draft_time, round_s, E, goodput)


def predict(m: PipelineModel, *, k: int, batch: float) -> Prediction:
    """Predicted steady-state figures at verify batch `batch` (sequences per verifier)."""
    r = round_of(m, k=k, batch=batch)
    V, D, b, k = max(m.n_verifiers, 0), max(m.n_drafters, 0), r.batch, r.k
    t_v, draft_time, round_s, E, goodput = (
        r.t_verify,
        r.draft_time,
        r.round_s,
        r.expected_tokens,
        r.goodput_tps,
    )
    itl = round_s / E
    # TTFT: prefill of one prompt on the verifier (queueing not modeled) + first round.
    prefill = m.t_verify(1, m.prompt_tokens)
    ttft = prefill + m.hop_s
    verify_util = t_v / round_s if round_s else 0.0
    # each drafter runs V/D groups' draft steps per round
    draft_util = (
        min(draft_time * (V / D) / round_s, 1.0)
        if (D > 0 and k > 0 and m.drafter_kind == "model")
        else 0.0
    )
    power = V * _power(m.verifier, verify_util) + (m.drafter_power(draft_util) if D else 0.0)
    tpj = goodput / power if power > 0 else 0.0
    sources = {
        "verify": m.verify_curve.source if m.verify_curve else "roofline",
        "draft": (m.draft_curve.source if m.draft_curve else "roofline")
        if m.drafter_kind == "model"
        else m.drafter_kind,
        "alpha": "per-position" if m.per_position else "scalar",
    }
    return Prediction(
        k=k,
        batch=b,
        goodput_tps=goodput,
        itl_s=itl,
        ttft_s=ttft,
        round_s=round_s,
        expected_tokens=E,
        power_w=power,
        tokens_per_j=tpj,
        draft_util=draft_util,
        verify_util=verify_util,
        sources=sources,
    )


def cost_per_million_tokens(goodput_tps: float, usd_per_hour_total: float | None) -> float | None:
    if usd_per_hour_total is None or goodput_tps <= 0:
        return None
    return usd_per_hour_total / (goodput_tps * 3600) * 1e6


def speedup(alpha: float, k: int, c: float) -> float:
    """Ideal speedup over plain decoding: S = E / (k*c + 1)."""
    return expected_tokens(k, alpha) / (k * c + 1)
