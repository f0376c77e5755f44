"""Adaptive k, decided every round by the drafter from what it measured (pure Python).

The drafter feeds this controller three measurements: the acceptance of its drafts by
position (from the verifiers' results), its own draft steps' cost by (batch, k), and the
verifier's forward cost by (batch, tokens per sequence) together with the rest of the round
(messages, gathering, emitting, bookkeeping: what a round's period holds besides its two
forward passes, by batch and k; before any period is measured, the round trip's `hop`). For
the batch at hand it predicts the goodput of every k in [k_min, k_max] and of k = 0 (plain
decoding) with the planner's own model (`fleet.planner.model.predict`) and drafts the best
one, so it never runs a k predicted to lose to plain decoding. A small hysteresis keeps it
from flapping between two k of equal worth.

The model is then held to what the rounds measured: the tokens each sequence received per
second of round, against the rate the model predicted for the k that ran, give a calibration
per (batch bucket, k) that scales the model's prediction for that k before the k's are
compared. A model that prices plain decoding too dear (smollm2 at 8 streams: 90 tokens/s
predicted, 102 measured, k 1 predicted 93 and measured 88) stops preferring the k that loses
after a few rounds of it. Per k, not pooled: on smollm2 at 1 stream of code the model was
right for k 1-5 and too generous for k 6-8; one speculation figure pooled over them fell to
0.78 and priced every k under plain decoding, which measured 15 % below k 1-5. A k that has
not run is taken at the model's word, and a k's evidence fades towards the model as it ages (a
half-life in rounds), so a k condemned by a bad patch is tried again later and its verdict
renewed, rather than never run and never cleared.

While k = 0 no draft is verified, so nothing would tell it when drafts become worth it
again: the drafter then drafts one token "in the shadow" for a few sequences after sending
the round (off the round's critical path) and compares it with the token the verifier
emits -- the acceptance of position 0, which keeps the estimate alive.
"""

from __future__ import annotations

from fleet.pipelines.policy import k_for, validate_policy
from fleet.planner.costs import Acceptance, StepCosts, bucket
from fleet.planner.model import PipelineModel, round_of

HYSTERESIS = 0.03  # a new k must beat the current one by 3 % to replace it
# Speculation replaces plain decoding only when predicted to beat it by 8 % (and is kept while
# predicted 3 % better): where its gain is small the model's is too high -- bench_control on
# smollm2 at 8 streams priced k 1-2 level with plain decoding, and they measured 12-21 % below
# it; adaptive k went there on the acceptance's noise and lost 8 % to plain decoding.
SPECULATION_MARGIN = 0.08
# Weight of a round of CALIBRATION_BATCH sequences in its k's calibration (realized /
# predicted rate): ~10 such rounds of memory. A round of fewer sequences weighs less (one
# sequence's tokens in a round are 1 to k + 1 by the luck of acceptance: at 1 stream, weighed
# as much as 8 sequences' mean, they condemned good k's at random -- bench_draft, learned draft,
# 1 stream: k 0 in 178 of 512 rounds, adaptive 1.19 of plain where k 4 fixed gave 1.32)
CALIBRATION_WEIGHT = 0.1
CALIBRATION_BATCH = 8
CALIBRATION_RANGE = (0.5, 2.0)  # one odd round cannot swing it further
# A k's calibration fades half-way back to the model's word in this many rounds of its bucket
# without it (~10 s at 1 stream): a k condemned by a bad patch is retried once its penalty has
# faded below the hysteresis, one round's cost, and its verdict renewed from where it faded to
CALIBRATION_HALF_LIFE = 200


class AdaptiveK:
    def __init__(self, *, prior_alpha: float = 0.5):
        self.acceptance = Acceptance(prior=prior_alpha)
        self.draft_costs = StepCosts()
        self.verify_costs = StepCosts()
        self.hop_s: float | None = None
        # the rest of a round by (verify batch, k): its period less the two forward passes
        self.rest_costs = StepCosts()
        self.verify_batch: float | None = None
        self.current: dict[int, int] = {}  # batch bucket -> k in use
        self.sweep_s: float | None = None  # the start-up sweep's duration
        # (batch bucket, k) -> (measured / predicted tokens per sequence-second, the bucket's
        # round count when last measured)
        self.calibration: dict[tuple[int, int], tuple[float, int]] = {}
        self.rounds_in: dict[int, int] = {}  # batch bucket -> choices made for it (the clock)
        # batch bucket -> k -> the model's tokens per sequence-second at the last choice
        self.predicted: dict[int, dict[int, float]] = {}
        self.predicted_round_s: dict[int, dict[int, float]] = {}  # the same, its round time
        # (batch bucket, k) -> EMA of predicted / measured round time: which part of a k's
        # calibration is the clock's (the rest is its tokens'), published for the benches
        self.time_ratio: dict[tuple[int, int], float] = {}

    # -- measurements --------------------------------------------------------------------------
    def observe_round_trip(self, seconds: float, verify_s: float, verify_batch: int) -> None:
        """A results message `seconds` after its drafts left; the verifier's forward took
        `verify_s` over `verify_batch` sequences."""
        if seconds <= 0 or verify_s < 0:
            return
        hop = max(seconds - verify_s, 0.0)
        self.hop_s = hop if self.hop_s is None else 0.8 * self.hop_s + 0.2 * hop
        vb = float(max(verify_batch, 1))
        self.verify_batch = vb if self.verify_batch is None else 0.8 * self.verify_batch + 0.2 * vb

    # A gap this much longer than the forward passes in it was idle time (no traffic, a
    # sequence waiting to join), not a round
    IDLE_FACTOR = 3.0

    def observe_round_period(
        self, period_s: float, propose_s: float, verify_s: float, verify_batch: int, k: int
    ) -> bool:
        """This round's drafts left `period_s` after the previous round's; between them the
        verifier scored that round's k drafts of `verify_batch` sequences (`verify_s`) and this
        drafter proposed (`propose_s`); `verify_s` includes the prefills of new sequences that
        held the round back (a request's cost, which the round would not pay again). The rest
        is what the round spends outside its forward passes. Measured from the period, not
        the round trip: the round trip misses the drafter's own side, and read at k = 0 it
        priced plain decoding 5 ms a round too dear (bench_control: 18.4 ms modeled, 13.2 ms
        measured at 8 streams). False for a gap that was not a round."""
        rest = period_s - propose_s - verify_s
        forward = propose_s + verify_s
        if rest < 0 or period_s > max(self.IDLE_FACTOR * forward, forward + 0.05):
            return False
        self.rest_costs.observe(max(verify_batch, 1), k, rest)
        return True

    def observe_realized(
        self, batch: int, k: int, tokens_per_seq_s: float, period_s: float | None = None
    ) -> None:
        """A round of `batch` sequences at `k` gave each `tokens_per_seq_s` (its tokens over
        its period, `period_s`): against what the model predicted for that k when it was
        chosen."""
        b = bucket(batch)
        pred = self.predicted.get(b, {}).get(k)
        if not pred or tokens_per_seq_s <= 0:
            return
        pred_s = self.predicted_round_s.get(b, {}).get(k)
        if period_s and pred_s:
            old_t = self.time_ratio.get((b, k), 1.0)
            self.time_ratio[(b, k)] = old_t + CALIBRATION_WEIGHT * (pred_s / period_s - old_t)
        low, high = CALIBRATION_RANGE
        ratio = min(max(tokens_per_seq_s / pred, low), high)
        # from the figure this k was judged by (its own, faded)
        old = self.calibration_of(b, k)
        weight = 1.0 - (1.0 - CALIBRATION_WEIGHT) ** (min(batch, 64) / CALIBRATION_BATCH)
        self.calibration[(b, k)] = (
            old + weight * (ratio - old),
            self.rounds_in.get(b, 0),
        )

    def _faded(self, b: int, entry: tuple[float, int]) -> float:
        ratio, at = entry
        age = max(self.rounds_in.get(b, 0) - at, 0)
        return 1.0 + (ratio - 1.0) * 0.5 ** (age / CALIBRATION_HALF_LIFE)

    def calibration_of(self, b: int, k: int) -> float:
        """The factor the model's prediction for k at batch bucket `b` is scaled by: k's own
        measured calibration, faded by its age. A k never measured here takes the verdict of
        the nearest speculative k below it that was (faded as that one is), else the
        model's word (1). From below only: the model's error grows with k (more draft steps,
        more positions of acceptance extrapolated), so a larger k is priced at least as
        harshly as a smaller one that disappointed, while a smaller k is still tried at the
        model's word -- a larger k's penalty never keeps the k's that deliver from running
        (smollm2, 1 stream: the model right for k 1-5, too generous for k 6-8). Without it
        every k was condemned one by one: with the model 25 % too generous for all of them,
        51 rounds at 8 sequences and over 400 at 1 before plain decoding held."""
        own = self.calibration.get((b, k))
        if own is not None:
            return self._faded(b, own)
        below = [j for (bb, j) in self.calibration if bb == b and 0 < j < k]
        return self._faded(b, self.calibration[(b, max(below))]) if below else 1.0

    def new_draft(self, draft_costs: StepCosts) -> None:
        """The drafter now drafts with another draft: what was measured of the old one -- its
        step costs, its acceptance, how its speculation fared against the model -- says
        nothing of this one, which starts from its own sweep and the prior. Kept: the
        verifier's costs, the rest of a round, and plain decoding's calibration (no draft in
        them). Before, an n-gram drafter's near-free steps and 0.21 acceptance priced a learned
        draft's k's until each k had run again."""
        self.draft_costs = draft_costs
        self.acceptance = Acceptance(prior=self.acceptance.prior)
        self.calibration = {bk: e for bk, e in self.calibration.items() if bk[1] == 0}
        self.time_ratio = {bk: r for bk, r in self.time_ratio.items() if bk[1] == 0}

    def merge_verify_costs(self, rows) -> None:
        """The verifier's table, as it sent it (its cells replace ours)."""
        self.verify_costs.merge(StepCosts.from_json(rows))

    # -- the decision --------------------------------------------------------------------------
    def ready(self) -> bool:
        return len(self.draft_costs) > 0 and len(self.verify_costs) > 0

    def model(self, batch: int) -> tuple[PipelineModel, float]:
        """The goodput model of this drafter's rounds, and the verify batch to predict at."""
        vb = max(self.verify_batch or batch, batch)
        k_top = max(
            [t - 1 for _, t in self.verify_costs.cells] + [k for _, k in self.draft_costs.cells]
        )
        m = PipelineModel(
            alpha=self.acceptance.alpha(),
            per_position=tuple(self.acceptance.per_position(max(k_top, 1))),
            # each bucket's speculative cells on a convex curve in tokens: one noisy cell
            # cannot reorder the k's (plain decoding's -- 1 token verified, k 0 -- as measured)
            verify_costs=self.verify_costs.smoothed(first=2),
            draft_costs=self.draft_costs.smoothed(),
            hop_s=self.hop_s or 0.0,
            rest_costs=self.rest_costs.smoothed(first=1) if len(self.rest_costs) else None,
            n_verifiers=1,
            n_drafters=vb / batch,  # drafter batch = verify batch * V / D = batch
        )
        return m, vb

    def goodput_by_k(self, batch: int, k_min: int, k_max: int) -> dict[int, float]:
        m, vb = self.model(batch)
        rounds = {k: round_of(m, k=k, batch=vb) for k in {0, *range(k_min, k_max + 1)}}
        self.predicted_round_s[bucket(batch)] = {k: r.round_s for k, r in rounds.items()}
        return {k: r.goodput_tps for k, r in rounds.items()}

    def choose(self, policy: dict, batch: int) -> int:
        """The k to draft for `batch` sequences under `policy` (fixed and table policies are
        followed as they are)."""
        try:
            p = validate_policy(policy)
        except ValueError:
            return 0
        if p["mode"] != "adaptive":
            self.predicted.clear()  # nothing to hold a fixed k's rounds to
            return k_for(p, batch)
        b = bucket(batch)
        self.rounds_in[b] = self.rounds_in.get(b, 0) + 1
        if not self.ready():
            return self.current.get(b, p["k"])
        modeled = self.goodput_by_k(batch, p["k_min"], p["k_max"])
        at_batch = max(self.verify_batch or batch, batch)  # the batch goodput_by_k predicts at
        self.predicted[b] = {k: g / at_batch for k, g in modeled.items()}
        goodput = {k: g * self.calibration_of(b, k) for k, g in modeled.items()}
        best = max(goodput, key=lambda k: (goodput[k], -k))
        now = self.current.get(b)
        # hysteresis between k worth about the same, never for a k predicted below plain's
        if (
            now is not None
            and now in goodput
            and (now == 0 or goodput[now] >= goodput[0])
            and goodput[best] <= goodput[now] * (1 + HYSTERESIS)
        ):
            best = now
        margin = HYSTERESIS if now else SPECULATION_MARGIN
        if best != 0 and goodput[best] < goodput[0] * (1 + margin):
            best = 0
        self.current[b] = best
        return best

    def snapshot(self) -> dict:
        """What the drafter publishes (telemetry, inspection)."""
        return {
            "acceptance": self.acceptance.to_json(),
            "draft_costs": self.draft_costs.to_json(),
            "verify_costs": self.verify_costs.to_json(),
            "hop_ms": None if self.hop_s is None else round(self.hop_s * 1000, 3),
            "rest_costs": self.rest_costs.to_json(),
            "k_by_bucket": {str(b): k for b, k in sorted(self.current.items())},
            "calibration": {
                f"{b}/{k}": round(self._faded(b, e), 3)
                for (b, k), e in sorted(self.calibration.items())
            },
            "calibration_time": {
                f"{b}/{k}": round(r, 3) for (b, k), r in sorted(self.time_ratio.items())
            },
            "sweep_s": self.sweep_s,
        }
