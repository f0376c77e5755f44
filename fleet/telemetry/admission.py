"""Which signed samples the aggregator believes: fresh, not replayed, physically possible.

A valid signature says which node sent a sample, not when nor whether its figures can be
true: a sample copied off the stream and added again verifies as well as the first time.
So, per node:

- `future` / `stale`: its `ts` is more than MAX_AHEAD_S ahead of the aggregator's clock or
  more than MAX_AGE_S behind it (the aggregator shows the last seconds; it never backfills);
- `replay`: its `ts` is not after that of the last sample taken from that node (the agent's
  clock is its sequence number: a node sends one sample per interval, each with a later
  `ts`). The window bounds what a restarted aggregator, which remembers no `ts`, can be fed
  again: samples of the last MAX_AGE_S, once each;
- `impossible`: a counter exceeds what the node's hardware profile can do in the sample's
  interval (see `Limits`: the profile's FLOPs, capped at MAX_NODE_TOKENS_PER_S for any
  profile, figures or none), or its power exceeds POWER_SLACK x the profile's TDP.

The bounds are generous on purpose (profiles are estimates, and a wrongly dropped sample
hides real work): they stop absurd figures, such as 1e15 drafts in a second, not optimism.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.telemetry.samples import MAX_BATCH

MAX_AHEAD_S = 30.0  # node clocks are NTP-synced; 30 s covers a sloppy one
MAX_AGE_S = 60.0
INTERVAL_SLACK_S = 1.0  # a sample's interval vs the time since the node's previous sample
MIN_STEP_S = 1e-6  # no engine verifies or drafts a batch in under a microsecond
MIN_PARAMS = 1e5  # no model that verifies or drafts is smaller (the demo pair is larger)
FLOPS_SLACK = 2.0  # a profile's peak may understate the device (it is an estimate)
POWER_SLACK = 4.0  # measured power of a host can exceed the profile's TDP (a whole server)
UNKNOWN_PEAK_TFLOPS = 125_000.0  # a profile without a figure: the largest single system
# Tokens a second through ONE node, whatever its profile says: a 135M-parameter model at a
# batch of 4096 on the fastest single accelerator sold today does a few million; ten million
# is above any device and model Tandem serves. It makes the FLOPs bound (which assumes the
# smallest model there is, MIN_PARAMS) mean something on a big GPU, and bounds a profile
# without figures: a 1-second sample of 2.6e9 tokens is refused on either.
MAX_NODE_TOKENS_PER_S = 1e7

REASONS = ("bad_signature", "malformed", "unknown_node", "replay", "stale", "future", "impossible")

# Counters that count tokens (or things of which there is at most one per token).
TOKEN_COUNTERS = (
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "generation_tokens",
    "requests_finished",
    "degraded_sequences",
)


@dataclass(frozen=True)
class Limits:
    """The most a node can do per second: tokens through its models, engine steps, watts."""

    tokens_per_s: float
    steps_per_s: float
    power_w: float | None  # None: the profile has no TDP to bound it by

    @classmethod
    def of_profile(cls, *, peak_bf16_tflops: float, tdp_w: float) -> Limits:
        peak = peak_bf16_tflops if peak_bf16_tflops > 0 else UNKNOWN_PEAK_TFLOPS
        # A token through a model of N parameters costs at least 2N FLOPs.
        tokens = peak * 1e12 * FLOPS_SLACK / (2 * MIN_PARAMS)
        steps = 1.0 / MIN_STEP_S
        return cls(
            # 33: k <= 32 drafts + 1 bonus a sequence a step
            tokens_per_s=min(tokens, steps * MAX_BATCH * 33, MAX_NODE_TOKENS_PER_S),
            steps_per_s=steps,
            power_w=POWER_SLACK * tdp_w if tdp_w > 0 else None,
        )


def freshness(
    ts: float, *, now: float, last_ts: float | None, interval_s: float | None = None
) -> str | None:
    """The reason to drop a sample dated `ts` covering `interval_s` (None: keep it).

    A sample's counters are bounded per second of its interval (`impossible`), so the
    interval itself must be real: a node cannot claim more time than has passed since its
    previous sample (nor, for its first one, more than the window the aggregator keeps) —
    else samples 1 us apart, each claiming an hour, would multiply every bound."""
    if ts > now + MAX_AHEAD_S:
        return "future"
    if ts < now - MAX_AGE_S:
        return "stale"
    if last_ts is not None and ts <= last_ts:
        return "replay"
    if interval_s is not None:
        elapsed = (ts - last_ts) if last_ts is not None else MAX_AGE_S
        if interval_s > elapsed + INTERVAL_SLACK_S:
            return "impossible"
    return None


def impossible(sample: dict, limits: Limits) -> str | None:
    """What in a normalized `sample` the node cannot have done (None: all of it is possible)."""
    dt = sample["interval_s"]
    tokens, steps = limits.tokens_per_s * dt, limits.steps_per_s * dt
    for key in TOKEN_COUNTERS:
        if sample[key] > tokens:
            return key
    if any(count > tokens for count in sample["num_accepted_tokens_per_pos"]):
        return "num_accepted_tokens_per_pos"
    for key in ("ttft_hist", "itl_hist"):
        if sum(sample[key]) > tokens:
            return key
    if sum(sample["verify_batch_hist"].values()) > steps:
        return "verify_batch_hist"
    if sample["draft_steps"] > steps:
        return "draft_steps"
    if limits.power_w is not None:
        if sample["power_w"] > limits.power_w:
            return "power_w"
        if any(joules > limits.power_w * dt for joules in sample["energy_j"].values()):
            return "energy_j"
    return None
