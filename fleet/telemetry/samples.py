"""The telemetry sample: what a node agent (or the simulator) reports once per interval.

Every counter in a sample is a PER-INTERVAL DELTA (what happened since the node's previous
sample), never a running total: deltas add up across nodes and time without bookkeeping of
restarts, and a lost sample loses one interval, not the meaning of the next one. Gauges
(`queue_depth`, `num_requests_running`, ...) are the value at the end of the interval; power is
the mean over the interval.

Who counts what (so nothing is counted twice in a pipeline):
- the VERIFIER counts the speculative-decoding counters (`num_drafts`, `num_draft_tokens`,
  `num_accepted_tokens`, `num_accepted_tokens_per_pos`), `generation_tokens` (accepted + bonus
  tokens delivered to clients), the verify batch histogram, TTFT and ITL;
- the DRAFTER counts its draft steps and their time;
- every node reports its own power, energy (by role), utilization and gauges.

Keys (all optional except `ts`; missing numbers are zero):

    ts                           float, unix seconds at the end of the interval
    interval_s                   float, length of the interval (default 1.0)
    role                         "draft" | "verify" (the role the node served in the interval)
    pipeline                     int | None (informational; placements in the DB win)
    simulated                    bool
    num_drafts                   int   draft rounds verified (one per sequence per round)
    num_draft_tokens             int   draft tokens proposed
    num_accepted_tokens          int   draft tokens accepted
    num_accepted_tokens_per_pos  [int] accepted tokens at draft position 0, 1, ...
    num_draft_tokens_per_pos     [int] drafts that HAD a position 0, 1, ... (a draft of k tokens
                                 counts at positions 0..k-1). Optional for older agents: when
                                 absent, every draft is taken to have had positions
                                 0..ceil(num_draft_tokens / num_drafts)-1. Without it a
                                 position that no longer exists (k lowered) would read as
                                 drafted and never accepted.
    generation_tokens            int   tokens delivered (accepted + bonus)
    requests_finished            int
    degraded_sequences           int   sequences the verifier went on decoding plainly (k=0)
                                 because their drafter was lost (in flight when it died, or
                                 started while the pipeline had no healthy drafter)
    verify_batch_hist            {"<batch size>": <verify steps>}
    draft_steps                  int,   draft_step_s  float (mean seconds per draft step)
    verify_step_s                float (mean seconds per verify step; steps = sum(hist))
    k_hist                       {"<batch>:<k>": <draft rounds>} the k the drafter chose per
                                 round, by its batch size (adaptive k at work)
    queue_depth, num_requests_running, num_requests_waiting, kv_slots_used, kv_slots_total: int
    ttft_hist, itl_hist          [int] counts per LATENCY_BUCKETS bucket (+Inf last), with
    ttft_sum, itl_sum            float seconds; or raw `ttft_s` / `itl_s` lists of seconds,
                                 which `normalize()` turns into the histogram form
    power_w                      float, mean power over the interval
    power_source                 "measured-nvml" | "measured-rapl" | "modeled"
    energy_j                     {"draft": J, "verify": J} (default: power_w * interval_s,
                                 attributed to `role`)
    utilization                  float in [0, 1]
"""

from __future__ import annotations

import bisect
import math

SCHEMA_VERSION = 1

# Upper bounds (seconds) of the latency histograms (TTFT and ITL), Prometheus style; the last
# count of a histogram is the +Inf bucket.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
)
N_BUCKETS = len(LATENCY_BUCKETS) + 1

POWER_SOURCES = ("measured-nvml", "measured-rapl", "modeled")
ROLES = ("draft", "verify")
MAX_POSITIONS = 32
MAX_BATCH = 4096
MAX_K = 16

INT_FIELDS = (
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "generation_tokens",
    "requests_finished",
    "degraded_sequences",
    "draft_steps",
    "queue_depth",
    "num_requests_running",
    "num_requests_waiting",
    "kv_slots_used",
    "kv_slots_total",
)
FLOAT_FIELDS = ("draft_step_s", "verify_step_s", "power_w", "ttft_sum", "itl_sum")


class InvalidSample(ValueError):
    pass


def bucket_counts(values_s: list[float]) -> tuple[list[int], float]:
    """Raw latencies (seconds) -> (counts per LATENCY_BUCKETS bucket, sum)."""
    counts = [0] * N_BUCKETS
    total = 0.0
    for value in values_s:
        value = float(value)
        if not math.isfinite(value) or value < 0:
            raise InvalidSample("latency samples must be finite and >= 0")
        counts[bisect.bisect_left(LATENCY_BUCKETS, value)] += 1
        total += value
    return counts, total


def _number(sample: dict, key: str, kind) -> float | int:
    value = sample.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidSample(f"{key} must be a number")
    if not math.isfinite(value) or value < 0:
        raise InvalidSample(f"{key} must be finite and >= 0")
    return kind(value)


def _hist(value, key: str) -> list[int]:
    if not isinstance(value, list) or len(value) != N_BUCKETS:
        raise InvalidSample(f"{key} must be a list of {N_BUCKETS} counts")
    out = []
    for count in value:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidSample(f"{key} counts must be integers >= 0")
        out.append(count)
    return out


def _drafts_per_pos(sample: dict, out: dict) -> list[int]:
    """How many drafts had each position: given, or (older agents) every draft up to the mean
    draft length (or the last position with an acceptance). An accepted count above its
    position's drafts is impossible."""
    accepted = out["num_accepted_tokens_per_pos"]
    given = sample.get("num_draft_tokens_per_pos")
    if given is None:
        drafts = out["num_drafts"]
        width = math.ceil(out["num_draft_tokens"] / drafts) if drafts else 0
        reached = max((i + 1 for i, a in enumerate(accepted) if a), default=0)
        return [drafts] * min(max(width, reached), MAX_POSITIONS)
    if not isinstance(given, list) or len(given) > MAX_POSITIONS:
        raise InvalidSample(f"num_draft_tokens_per_pos must be a list of <= {MAX_POSITIONS}")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in given):
        raise InvalidSample("num_draft_tokens_per_pos must hold integers >= 0")
    for i, a in enumerate(accepted):
        if a > (given[i] if i < len(given) else 0):
            raise InvalidSample("accepted tokens at a position exceed the drafts that had it")
    return list(given)


def _k_hist(value) -> dict[str, int]:
    if not isinstance(value, dict) or len(value) > 512:
        raise InvalidSample("k_hist must map '<batch>:<k>' to rounds (at most 512 entries)")
    out = {}
    for key, rounds in value.items():
        batch, _, k = str(key).partition(":")
        if not (batch.isdigit() and k.isdigit()):
            raise InvalidSample("k_hist keys are '<batch>:<k>'")
        if not (1 <= int(batch) <= MAX_BATCH and int(k) <= MAX_K):
            raise InvalidSample(f"k_hist: batch 1..{MAX_BATCH}, k 0..{MAX_K}")
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
            raise InvalidSample("k_hist counts must be integers >= 0")
        if rounds:
            out[f"{int(batch)}:{int(k)}"] = rounds
    return out


def normalize(sample: dict) -> dict:
    """A validated, canonical copy of `sample` (raises InvalidSample). Unknown keys dropped."""
    if not isinstance(sample, dict):
        raise InvalidSample("a sample is a JSON object")
    ts = sample.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise InvalidSample("ts (unix seconds) is required")
    out: dict = {"v": SCHEMA_VERSION, "ts": float(ts)}
    interval = sample.get("interval_s", 1.0)
    if isinstance(interval, bool) or not isinstance(interval, int | float):
        raise InvalidSample("interval_s must be a number")
    if not (0 < interval <= 3600):
        raise InvalidSample("interval_s must be in (0, 3600]")
    out["interval_s"] = float(interval)
    role = sample.get("role", "verify")
    if role not in ROLES:
        raise InvalidSample(f"role must be one of {ROLES}")
    out["role"] = role
    pipeline = sample.get("pipeline")
    if pipeline is not None and (isinstance(pipeline, bool) or not isinstance(pipeline, int)):
        raise InvalidSample("pipeline must be an integer id or null")
    out["pipeline"] = pipeline
    out["simulated"] = bool(sample.get("simulated", False))
    for key in INT_FIELDS:
        out[key] = _number(sample, key, int)
    for key in FLOAT_FIELDS:
        out[key] = _number(sample, key, float)
    per_pos = sample.get("num_accepted_tokens_per_pos") or []
    if not isinstance(per_pos, list) or len(per_pos) > MAX_POSITIONS:
        raise InvalidSample(f"num_accepted_tokens_per_pos must be a list of <= {MAX_POSITIONS}")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in per_pos):
        raise InvalidSample("num_accepted_tokens_per_pos must hold integers >= 0")
    out["num_accepted_tokens_per_pos"] = list(per_pos)
    out["num_draft_tokens_per_pos"] = _drafts_per_pos(sample, out)
    hist = sample.get("verify_batch_hist") or {}
    if not isinstance(hist, dict):
        raise InvalidSample("verify_batch_hist must map batch size to steps")
    clean_hist = {}
    for size, steps in hist.items():
        try:
            size_i = int(size)
        except (TypeError, ValueError) as exc:
            raise InvalidSample("verify_batch_hist keys must be batch sizes") from exc
        if not (1 <= size_i <= MAX_BATCH) or isinstance(steps, bool) or not isinstance(steps, int):
            raise InvalidSample("verify_batch_hist: sizes 1..4096, integer step counts")
        if steps > 0:
            clean_hist[str(size_i)] = steps
    out["verify_batch_hist"] = clean_hist
    k_hist = _k_hist(sample.get("k_hist") or {})
    if k_hist:  # drafters only: absent otherwise (the canonical fast path knows no k_hist)
        out["k_hist"] = k_hist
    for name in ("ttft", "itl"):
        if f"{name}_s" in sample:
            raw = sample[f"{name}_s"]
            if not isinstance(raw, list):
                raise InvalidSample(f"{name}_s must be a list of seconds")
            out[f"{name}_hist"], out[f"{name}_sum"] = bucket_counts(raw)
        elif f"{name}_hist" in sample:
            out[f"{name}_hist"] = _hist(sample[f"{name}_hist"], f"{name}_hist")
        else:
            out[f"{name}_hist"] = [0] * N_BUCKETS
    source = sample.get("power_source", "modeled")
    if source not in POWER_SOURCES:
        raise InvalidSample(f"power_source must be one of {POWER_SOURCES}")
    out["power_source"] = source
    util = _number(sample, "utilization", float)
    out["utilization"] = min(util, 1.0)
    energy = sample.get("energy_j")
    if energy is None:
        energy = {role: out["power_w"] * out["interval_s"]}
    if not isinstance(energy, dict) or set(energy) - set(ROLES):
        raise InvalidSample('energy_j must look like {"draft": J, "verify": J}')
    out["energy_j"] = {r: _number(energy, r, float) for r in ROLES}
    return out
