"""The arithmetic of live telemetry: additive accumulators of samples and the figures derived
from them. Pure Python, no Django: the aggregator, the rollups and the tests share it.

An `Acc` holds sums over samples (counters, histograms, and time integrals of gauges:
power x seconds, utilization x seconds, ...). Accumulators add and subtract exactly, so a
sliding window is "add the new sample, subtract the expired one", and a pipeline is the sum of
its nodes. `derive()` turns an accumulator into the figures on the screens:

- acceptance rate            accepted / draft tokens            (not alpha)
- mean acceptance length     1 + accepted / drafts              (vLLM's definition)
- per-position acceptance    p_i = a_i / d_i: accepted at position i over the drafts that
                             HAD a position i (positions no draft had are left out, so a
                             lowered k does not read as positions never accepted)
- alpha (estimated)          ratio of consecutive positions, pooled:
                             sum_i a_i / sum_i d_i * p_{i-1}  (p_{-1} = 1): the trials at
                             position i are the drafts that had it and got through i-1.
                             With one k throughout it is sum a_i / (drafts + sum_{i<K-1} a_i)
- goodput                    generation tokens (accepted + bonus) per second
- verify batch size          mean and histogram over verify steps
- ITL / TTFT p50, p99        from the latency histograms (Prometheus-style interpolation)
- power W and tokens/J       total, drafting and verification; `power_source` says
                             measured | modeled | mixed (mixed: part of it is modeled)
"""

from __future__ import annotations

from collections.abc import Sequence

from fleet.telemetry.samples import LATENCY_BUCKETS, N_BUCKETS

SCALARS = (
    "dur",  # node-seconds covered
    "n",  # samples
    "measured_dur",
    "modeled_dur",
    "drafts",
    "draft_tokens",
    "accepted",
    "gen_tokens",
    "finished",
    "draft_steps",
    "draft_step_sum",
    "verify_steps",
    "verify_step_sum",
    "energy_draft",
    "energy_verify",
    "power_int",
    "util_int",
    "queue_int",
    "running_int",
    "waiting_int",
    "kv_int",
    "kv_total_int",
    "ttft_sum",
    "itl_sum",
)


class Acc:
    __slots__ = (
        *SCALARS,
        "per_pos",
        "per_pos_drafts",
        "ttft_hist",
        "itl_hist",
        "batch_hist",
        "k_hist",
    )
    # the scalars, set in __init__ from SCALARS (declared for the type checker)
    dur: float
    n: float
    measured_dur: float
    modeled_dur: float
    drafts: float
    draft_tokens: float
    accepted: float
    gen_tokens: float
    finished: float
    draft_steps: float
    draft_step_sum: float
    verify_steps: float
    verify_step_sum: float
    energy_draft: float
    energy_verify: float
    power_int: float
    util_int: float
    queue_int: float
    running_int: float
    waiting_int: float
    kv_int: float
    kv_total_int: float
    ttft_sum: float
    itl_sum: float

    def __init__(self) -> None:
        for name in SCALARS:
            setattr(self, name, 0.0)
        self.per_pos: list[float] = []  # accepted at position i
        self.per_pos_drafts: list[float] = []  # drafts that had a position i
        self.ttft_hist: list[float] = [0.0] * N_BUCKETS
        self.itl_hist: list[float] = [0.0] * N_BUCKETS
        self.batch_hist: dict[int, float] = {}
        self.k_hist: dict[str, float] = {}  # "<batch>:<k>" -> draft rounds

    # --- feeding --------------------------------------------------------------------------
    def add_sample(self, s: dict, sign: int = 1) -> None:
        """Add (sign=1) or remove (sign=-1) one normalized sample."""
        dt = s["interval_s"]
        self.dur += sign * dt
        self.n += sign
        if s["power_source"] == "modeled":
            self.modeled_dur += sign * dt
        else:
            self.measured_dur += sign * dt
        self.drafts += sign * s["num_drafts"]
        self.draft_tokens += sign * s["num_draft_tokens"]
        self.accepted += sign * s["num_accepted_tokens"]
        self.gen_tokens += sign * s["generation_tokens"]
        self.finished += sign * s["requests_finished"]
        self.draft_steps += sign * s["draft_steps"]
        self.draft_step_sum += sign * s["draft_steps"] * s["draft_step_s"]
        steps = 0
        hist = self.batch_hist
        for size, count in s["verify_batch_hist"].items():
            size = int(size)
            hist[size] = hist.get(size, 0.0) + sign * count
            if hist[size] <= 1e-9:
                del hist[size]
            steps += count
        self.verify_steps += sign * steps
        self.verify_step_sum += sign * steps * s["verify_step_s"]
        if s.get("k_hist"):
            _add_dict(self.k_hist, s["k_hist"], sign)
        energy = s["energy_j"]
        self.energy_draft += sign * energy["draft"]
        self.energy_verify += sign * energy["verify"]
        self.power_int += sign * s["power_w"] * dt
        self.util_int += sign * s["utilization"] * dt
        self.queue_int += sign * s["queue_depth"] * dt
        self.running_int += sign * s["num_requests_running"] * dt
        self.waiting_int += sign * s["num_requests_waiting"] * dt
        self.kv_int += sign * s["kv_slots_used"] * dt
        self.kv_total_int += sign * s["kv_slots_total"] * dt
        self.ttft_sum += sign * s["ttft_sum"]
        self.itl_sum += sign * s["itl_sum"]
        _add_list(self.per_pos, s["num_accepted_tokens_per_pos"], sign)
        _add_list(self.per_pos_drafts, s.get("num_draft_tokens_per_pos", ()), sign)
        if any(s["ttft_hist"]):
            for i, v in enumerate(s["ttft_hist"]):
                if v:
                    self.ttft_hist[i] += sign * v
        if any(s["itl_hist"]):
            for i, v in enumerate(s["itl_hist"]):
                if v:
                    self.itl_hist[i] += sign * v

    def add(self, other: Acc, scale: float = 1.0) -> None:
        """self += other * scale (the hot path of every tick: see _add_scalars)."""
        _add_scalars(self, other, scale)
        _add_list(self.per_pos, other.per_pos, scale)
        _add_list(self.per_pos_drafts, other.per_pos_drafts, scale)
        if any(other.ttft_hist):
            self.ttft_hist = [
                a + scale * b for a, b in zip(self.ttft_hist, other.ttft_hist, strict=True)
            ]
        if any(other.itl_hist):
            self.itl_hist = [
                a + scale * b for a, b in zip(self.itl_hist, other.itl_hist, strict=True)
            ]
        for size, count in other.batch_hist.items():
            self.batch_hist[size] = self.batch_hist.get(size, 0.0) + scale * count
        if other.k_hist:
            _add_dict(self.k_hist, other.k_hist, scale)

    def add_rates_of(self, node: Acc) -> None:
        """Add a node's window normalised to one second: summing these gives fleet rates
        (tokens/s, W) and node-weighted means, whatever each node's window length."""
        if node.dur > 0:
            self.add(node, 1.0 / node.dur)

    def copy(self) -> Acc:
        clone = Acc()
        clone.add(self)
        return clone

    @property
    def empty(self) -> bool:
        return self.n <= 0


def _add_list(acc: list[float], values, scale: float) -> None:
    if len(values) > len(acc):
        acc.extend([0.0] * (len(values) - len(acc)))
    for i, v in enumerate(values):
        if v:
            acc[i] += scale * v


def _add_dict(acc: dict, values: dict, scale: float) -> None:
    for key, v in values.items():
        acc[key] = acc.get(key, 0.0) + scale * v
        if acc[key] <= 1e-9:
            del acc[key]


# The batch-size bands of the "k by batch" chart: upper bounds, each band a series
# `k_batch_<bound>` ("k_batch_1": rounds of 1 sequence, "k_batch_4": of 2-4, ...).
K_BATCH_BANDS = (1, 4, 16, 64, 4096)
K_BATCH_FIELDS = tuple(f"k_batch_{b}" for b in K_BATCH_BANDS)


def k_figures(
    k_hist: dict[str, float],
) -> tuple[float | None, dict[str, float], dict[str, float | None]]:
    """From a drafter's k_hist, in one pass: the mean k drafted per round, the mean k by batch
    size, and the mean k per batch band (K_BATCH_FIELDS; None where no round fell)."""
    rounds = k_sum = 0.0
    by_batch: dict[int, list[float]] = {}
    by_band = {f: [0.0, 0.0] for f in K_BATCH_FIELDS}
    for key, n in k_hist.items():
        b, _, k = key.partition(":")
        batch, drafted = int(b), n * int(k)
        rounds += n
        k_sum += drafted
        band = next((x for x in K_BATCH_BANDS if batch <= x), K_BATCH_BANDS[-1])
        for cell in (by_batch.setdefault(batch, [0.0, 0.0]), by_band[f"k_batch_{band}"]):
            cell[0] += drafted
            cell[1] += n
    mean = round(k_sum / rounds, 3) if rounds > 0 else None
    return (
        mean,
        {str(b): round(c[0] / c[1], 2) for b, c in sorted(by_batch.items()) if c[1]},
        {f: (round(c[0] / c[1], 2) if c[1] > 0 else None) for f, c in by_band.items()},
    )


def _make_add_scalars():
    """`a.x += scale * b.x` for every scalar, unrolled once at import (a loop of getattr /
    setattr costs 3x more, and this runs for every node on every tick)."""
    body = "\n".join(f"    a.{name} += scale * b.{name}" for name in SCALARS)
    namespace: dict = {}
    exec(f"def _add_scalars(a, b, scale):\n{body}\n", namespace)  # noqa: S102 (fixed names)
    return namespace["_add_scalars"]


_add_scalars = _make_add_scalars()


def quantile(hist: Sequence[float], q: float) -> float | None:
    """Quantile from bucket counts (last bucket +Inf), linear within a bucket."""
    total = sum(hist)
    if total <= 0:
        return None
    rank = q * total
    seen = 0.0
    for i, count in enumerate(hist):
        if count <= 0:
            continue
        if seen + count >= rank:
            if i >= len(LATENCY_BUCKETS):
                return LATENCY_BUCKETS[-1]
            lower = LATENCY_BUCKETS[i - 1] if i > 0 else 0.0
            upper = LATENCY_BUCKETS[i]
            return lower + (upper - lower) * max(0.0, rank - seen) / count
        seen += count
    return LATENCY_BUCKETS[-1]


# Below this many drafts (a count, or a rate after `add_rates_of`) a position did not exist
# in the window: what is left after subtracting expired samples is float residue.
_NO_DRAFTS = 1e-9


def positions(per_pos: list[float], per_pos_drafts: list[float]) -> list[tuple[float, float]]:
    """(accepted a_i, drafts d_i) for the positions some draft had, in order: a position no
    draft had ends the list (a draft of k tokens has positions 0..k-1, so none is skipped)."""
    out = []
    for i, d in enumerate(per_pos_drafts):
        if d <= _NO_DRAFTS:
            break
        out.append((per_pos[i] if i < len(per_pos) else 0.0, d))
    return out


def per_position_acceptance(pos: list[tuple[float, float]]) -> list[float]:
    """p_i = a_i / d_i: how often position i was accepted when a draft had it."""
    return [min(a / d, 1.0) for a, d in pos]


def per_position_asked(pos: list[tuple[float, float]], k_hist: dict[str, float]) -> list[float]:
    """a_i / asked_i: how often position i was accepted per sequence-round whose drafter was
    asked for more than i tokens (the drafter's k_hist), a draft made or not. The goodput
    model needs this one: a drafter that proposes nothing without a match (n-gram) makes
    p_i above (vLLM's definition) look high while most rounds gain nothing. Empty without a
    drafter's rounds in the window (a verifier's own figures)."""
    if not pos or not k_hist:  # every node's own window: one of the two is empty
        return []
    asked = [0.0] * len(pos)
    for key, n in k_hist.items():
        b, _, k = key.partition(":")
        for i in range(min(int(k), len(pos))):
            asked[i] += n * int(b)
    out = []
    for (a, d), n in zip(pos, asked, strict=True):
        if n <= _NO_DRAFTS:
            break
        out.append(min(a / n, a / d, 1.0))  # the windows of drafter and verifier may differ
    return out


def estimate_alpha(pos: list[tuple[float, float]]) -> float | None:
    """Pooled ratio of consecutive positions over the positions that existed: trials at
    position i are the d_i drafts that had it times the rate p_{i-1} of getting through
    position i-1 (p_{-1} = 1). With one k in the window this is the classic
    sum a_i / (drafts + sum_{i<K-1} a_i); with a k change inside it, each position is judged
    only by the drafts that had it (a lowered k does not pull alpha down)."""
    if not pos:
        return None
    numerator = 0.0
    denominator = 0.0
    prev_rate = 1.0
    for a, d in pos:
        numerator += a
        denominator += d * prev_rate
        prev_rate = a / d
    return min(numerator / denominator, 1.0) if denominator > 0 else None


def _ratio(a: float, b: float, digits: int = 4) -> float | None:
    return round(a / b, digits) if b > 0 else None


def power_source_of(acc: Acc) -> str | None:
    if acc.dur <= 0:
        return None
    if acc.modeled_dur <= 1e-9:
        return "measured"
    if acc.measured_dur <= 1e-9:
        return "modeled"
    return "mixed"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 2)


def derive(acc: Acc, span_s: float) -> dict:
    """The screen figures of `acc`. Rates (tokens/s, W, gauges) divide by `span_s`: a node's
    window length, 1.0 for a sum of `add_rates_of`, or a rollup bucket's length."""
    span = span_s if (span_s > 0 and acc.dur > 1e-9) else 0.0  # no data: no rates, not 0
    tokens_per_s = acc.gen_tokens / span if span else None
    power_w = acc.power_int / span if span else None
    draft_w = acc.energy_draft / span if span else None
    verify_w = acc.energy_verify / span if span else None
    energy = acc.energy_draft + acc.energy_verify
    batch_steps = sum(acc.batch_hist.values())
    batch_mean = (
        sum(size * count for size, count in acc.batch_hist.items()) / batch_steps
        if batch_steps > 0
        else None
    )
    drafts = acc.drafts
    pos = positions(acc.per_pos, acc.per_pos_drafts) if drafts > 0 else []
    per_pos = [round(p, 4) for p in per_position_acceptance(pos)]
    alpha = estimate_alpha(pos)
    itl_count = sum(acc.itl_hist)
    k_mean, k_by_batch, k_bands = k_figures(acc.k_hist)
    return {
        "k_mean": k_mean,
        "k_by_batch": k_by_batch,
        **k_bands,
        "acceptance_rate": _ratio(acc.accepted, acc.draft_tokens),
        "mean_acceptance_length": round(1 + acc.accepted / drafts, 4) if drafts > 0 else None,
        "per_position_acceptance": per_pos,
        "per_position_asked": [round(p, 4) for p in per_position_asked(pos, acc.k_hist)],
        "alpha": round(alpha, 4) if alpha is not None else None,
        "tokens_per_s": _round(tokens_per_s, 2),
        "draft_tokens_per_s": _round(acc.draft_tokens / span if span else None, 2),
        "batch_mean": _round(batch_mean, 2),
        "batch_hist": {str(k): round(v, 3) for k, v in sorted(acc.batch_hist.items())},
        "itl_mean_ms": _ms(acc.itl_sum / itl_count if itl_count else None),
        "itl_p50_ms": _ms(quantile(acc.itl_hist, 0.5)),
        "itl_p99_ms": _ms(quantile(acc.itl_hist, 0.99)),
        "ttft_p50_ms": _ms(quantile(acc.ttft_hist, 0.5)),
        "ttft_p99_ms": _ms(quantile(acc.ttft_hist, 0.99)),
        "draft_step_ms": _ms(acc.draft_step_sum / acc.draft_steps if acc.draft_steps else None),
        "verify_step_ms": _ms(acc.verify_step_sum / acc.verify_steps if acc.verify_steps else None),
        "power_w": _round(power_w, 1),
        "power_draft_w": _round(draft_w, 1),
        "power_verify_w": _round(verify_w, 1),
        "power_source": power_source_of(acc),
        "tokens_per_j": _ratio(acc.gen_tokens, energy),
        "tokens_per_j_draft": _ratio(acc.gen_tokens, acc.energy_draft),
        "tokens_per_j_verify": _ratio(acc.gen_tokens, acc.energy_verify),
        "utilization": _ratio(acc.util_int, acc.dur, 3),
        "queue_depth": _round(acc.queue_int / span if span else None, 1),
        "running": _round(acc.running_int / span if span else None, 1),
        "waiting": _round(acc.waiting_int / span if span else None, 1),
        "kv_slots_used": _round(acc.kv_int / span if span else None, 1),
        "kv_usage": _kv_usage(acc),
    }


def _kv_usage(acc: Acc) -> float | None:
    """Share of the KV slots in use (time-weighted). The slots' names are set from SCALARS,
    which mypy cannot see."""
    used, total = (getattr(acc, name) for name in ("kv_int", "kv_total_int"))
    return _ratio(used, total, 3)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
