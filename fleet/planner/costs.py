"""Measured step costs and per-position acceptance: the inputs of the one goodput model
(`fleet.planner.model.predict`). Pure Python: the node workers, the planner and the simulator
all import it.

A `StepCosts` table holds the seconds of one kind of step by (batch bucket, tokens per
sequence) -- a verifier's forward over k+1 tokens per sequence, a drafter's k draft steps --
as exponential moving averages of what was measured: first by a short sweep when the worker
starts, then by every live round. A cell that was never measured is estimated from the
measured ones: by the nearest bucket of the same width scaled linearly in batch, or, with no
cell of that width, by a least-squares fit t = a + x*tokens + y*batch over all cells. The
table travels as JSON (telemetry, round messages).

`Acceptance` is the per-position acceptance of a pipeline's drafts as decayed counts: each
round's drafts add to them, older rounds weigh less (half-life of a few rounds), so a change
of traffic shows in the estimate within a few rounds. Positions with too few recent drafts
behind them are extrapolated from the ones that have them, and a cold start reads a prior.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence

from fleet.planner.fitting import Curve, fit_convex, fit_linear2

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def bucket(batch: float) -> int:
    """The smallest bucket >= batch (the last one for anything larger)."""
    for b in BUCKETS:
        if batch <= b:
            return b
    return BUCKETS[-1]


def _finite(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


class StepCosts:
    """Seconds of a step by (batch bucket, tokens per sequence), EMA per cell."""

    REFIT_EVERY = 64  # observations between refits of the fallback fit (it is least squares)

    RATIO_EMA = 0.1  # weight of a live round in the live / swept ratio

    def __init__(self, ema: float = 0.2, cells: dict | None = None):
        self.ema = ema
        self.cells: dict[tuple[int, int], list[float]] = dict(cells or {})  # -> [seconds, n]
        self._fitted: Curve | None = None
        self._since_fit = 0
        self._observed = 0  # observations so far
        # first -> (the smoothed table, observations when it was made)
        self._smoothed: dict[int, tuple[StepCosts, int]] = {}
        # The start-up sweep times steps on a quiet worker; live rounds run beside the rest
        # of the node (the other loop, messages, detokenizing) and take longer. A cell only
        # the sweep measured is read at the live level -- its sweep value times the ratio
        # live rounds show over the cells measured both ways -- or the k in use, measured
        # live, would always look dearer than the ones beside it, and adaptive k would
        # flap between them (and drift towards the k it does not run).
        self.swept: dict[tuple[int, int], float] = {}  # cell -> its sweep value
        self.live: set[tuple[int, int]] = set()  # cells live rounds measured since the sweep
        self.live_ratio = 1.0

    # -- measuring -----------------------------------------------------------------------------
    def observe(self, batch: int, tokens: int, seconds: float) -> None:
        if batch < 1 or tokens < 0 or not _finite(seconds) or seconds < 0:
            return
        key = (bucket(batch), int(tokens))
        cell = self.cells.get(key)
        self._since_fit += 1
        self._observed += 1
        if cell is None:
            self.cells[key] = [seconds, 1.0]
            self._fitted = None  # a new cell: refit when next needed
            self._smoothed.clear()
        else:
            cell[0] += self.ema * (seconds - cell[0])
            cell[1] += 1.0
        if self.swept:  # a live round (the sweep is over)
            self.live.add(key)
            base = self.swept.get(key)
            if base:
                self.live_ratio += self.RATIO_EMA * (seconds / base - self.live_ratio)

    def end_sweep(self) -> None:
        """What was observed so far was the start-up sweep's: later rounds are live."""
        self.swept = {key: c[0] for key, c in self.cells.items()}
        self.live.clear()
        self.live_ratio = 1.0
        self._smoothed.clear()

    def _value(self, key: tuple[int, int]) -> float:
        """A cell's seconds as a live round would take them."""
        seconds = self.cells[key][0]
        if not self.swept or key in self.live:
            return seconds
        return seconds * self.live_ratio

    def __len__(self) -> int:
        return len(self.cells)

    def merge(self, other: StepCosts) -> None:
        """Take `other`'s cells (another node's table, as it sent it) over ours."""
        self.cells.update(other.cells)
        self._fitted = None
        self._smoothed.clear()

    # -- estimating ----------------------------------------------------------------------------
    def measured(self, batch: float, tokens: int) -> float | None:
        key = (bucket(batch), int(tokens))
        return self._value(key) if key in self.cells else None

    def estimate(self, batch: float, tokens: int) -> float | None:
        """Seconds of a step over `batch` sequences of `tokens` tokens each (None: nothing
        measured at all). Between two measured buckets of the same width: linear in batch;
        beyond them: the nearest one (a smaller batch never costs more than a larger one) or
        the fitted slope; a width never measured: the fit, scaled to the measured cells of
        the nearest width in this bucket."""
        if not self.cells:
            return None
        b, t = bucket(batch), int(tokens)
        if (b, t) in self.cells:
            return self._value((b, t))
        same = sorted((bb, self._value((bb, tt))) for (bb, tt) in self.cells if tt == t)
        if same:
            lo = [p for p in same if p[0] < b]
            hi = [p for p in same if p[0] > b]
            if lo and hi:
                (b0, s0), (b1, s1) = lo[-1], hi[0]
                return s0 + (s1 - s0) * (b - b0) / (b1 - b0)
            if hi:
                return hi[0][1]
            fit = self._fit()
            b0, s0 = lo[-1]
            return s0 + max(fit(t * b, b) - fit(t * b0, b0), 0.0)
        fit = self._fit()
        here = [(tt, self._value((bb, tt))) for (bb, tt) in self.cells if bb == b]
        if here:
            tt, secs = min(here, key=lambda p: abs(p[0] - t))
            base = fit(tt * b, b)
            if base > 0:
                return max(secs * fit(t * b, b) / base, 0.0)
        return max(fit(t * b, b), 0.0)

    def _fit(self) -> Curve:
        """The fallback fit over all cells, cached (refit after a new cell or REFIT_EVERY
        observations: the drafter asks for it every round)."""
        if self._fitted is None or self._since_fit >= self.REFIT_EVERY:
            points = [(b * t, b, self._value((b, t)), c[1]) for (b, t), c in self.cells.items()]
            self._fitted, self._since_fit = fit_linear2(points), 0
        return self._fitted

    SMOOTH_EVERY = 8  # observations a smoothed table is reused for
    SMOOTH_WEIGHT_CAP = 16.0  # a cell's weight in its bucket's curve: its rounds, up to this

    def smoothed(self, first: int = 0) -> StepCosts:
        """This table with each batch bucket's cells of `first` tokens or more on their
        least-squares convex curve in tokens (`fitting.fit_convex`; weighted by each cell's rounds,
        capped; cost never falling with tokens); narrower cells kept as measured (plain
        decoding's step has no drafts to score or send: it is not on speculation's curve). A
        live cell is an EMA of rounds that shared two cores with prefills and the web tier:
        at 8 streams the drafter's table read k 2 at 11.4 ms and k 4 at 9.8 ms, and adaptive
        k flapped between k's that noise reordered (1, 4, 8 within ten rounds of steady
        traffic). A bucket with one such width keeps its cell.

        Cached until a new cell, a merge or SMOOTH_EVERY observations (the drafter asks every
        round; making it cost ~1.5 ms of a 2 ms choice on the drafter's critical path)."""
        cached = self._smoothed.get(first)
        if cached is not None and self._observed - cached[1] < self.SMOOTH_EVERY:
            return cached[0]
        out = StepCosts(self.ema)
        for (b, t), c in self.cells.items():
            out.cells[(b, t)] = [self._value((b, t)), c[1]]
        for b in sorted({bb for bb, _ in self.cells}):
            cells = {t: c for (bb, t), c in self.cells.items() if bb == b and t >= first}
            if len(cells) < 2:
                continue
            points = [
                (float(t), self._value((b, t)), min(c[1], self.SMOOTH_WEIGHT_CAP))
                for t, c in cells.items()
            ]
            curve = fit_convex(points)
            for t, c in cells.items():
                out.cells[(b, t)] = [max(curve(t), 0.0), c[1]]
        self._smoothed[first] = (out, self._observed)
        return out

    # -- the wire ------------------------------------------------------------------------------
    def to_json(self) -> list[list[float]]:
        return [
            [b, t, round(self._value((b, t)), 7), int(c[1])]
            for (b, t), c in sorted(self.cells.items())
        ]

    @classmethod
    def from_json(cls, rows, ema: float = 0.2) -> StepCosts:
        """Rows of [bucket, tokens, seconds, n]; malformed rows are skipped (never raises)."""
        out = cls(ema)
        if not isinstance(rows, list):
            return out
        for row in rows[:512]:
            if not isinstance(row, list | tuple) or len(row) != 4 or not all(map(_finite, row)):
                continue
            b, t, s, n = row
            if b >= 1 and 0 <= t <= 64 and s >= 0 and n >= 0:
                out.cells[(bucket(b), int(t))] = [float(s), float(n)]
        return out


class Acceptance:
    """Per-position acceptance from decayed draft and accept counts.

    Older counts decay by `decay` per `samples_per_decay` drafts observed (at least once a
    round): a batch of 8 forgets at 0.81 a round, a batch of 1 at 0.9 -- so after a change of
    traffic the estimate has moved most of the way within ten to twenty rounds, and a small
    batch's estimate still rests on some twenty drafts. A cold start reads `prior` (alpha);
    each position is pulled a little towards the acceptance the positions before it imply."""

    MIN_DRAFTS = 3.0  # decayed drafts a position needs to be read rather than extrapolated
    WINDOW = 8  # position-0 drafts the change detector's recent window holds at least
    SHIFT_Z = 3.0  # standard errors apart before a change of traffic is called

    def __init__(
        self,
        *,
        decay: float = 0.9,
        samples_per_decay: float = 16.0,
        prior: float = 0.5,
        prior_weight: float = 1.0,
    ):
        self.decay, self.samples_per_decay = decay, samples_per_decay
        self.prior, self.prior_weight = prior, prior_weight
        self.drafts: list[float] = []
        self.accepted: list[float] = []
        self.rounds = 0
        # position 0's (drafts, accepted) of the last rounds (at least WINDOW drafts), and of
        # the rounds before them (decayed): the change detector compares the two
        self.window: deque[tuple[int, int]] = deque()
        self.before = [0.0, 0.0]
        self.shifts = 0  # times a change of traffic was detected (and old counts dropped)

    def observe(self, drafted: Sequence[int], accepted: Sequence[int]) -> None:
        """One round: drafted[i] drafts had position i, accepted[i] of them were accepted."""
        width = max(len(self.drafts), len(drafted))
        self.drafts += [0.0] * (width - len(self.drafts))
        self.accepted += [0.0] * (width - len(self.accepted))
        n = drafted[0] if drafted else 0
        keep = self.decay ** max(1.0, n / self.samples_per_decay)
        if n and self._shifted(n, min(accepted[0] if accepted else 0, n), keep):
            keep, self.shifts = 0.1, self.shifts + 1
        for i in range(width):
            self.drafts[i] *= keep
            self.accepted[i] *= keep
            if i < len(drafted):
                self.drafts[i] += drafted[i]
                self.accepted[i] += min(accepted[i] if i < len(accepted) else 0, drafted[i])
        self.rounds += 1

    def _shifted(self, n: int, a: int, keep: float) -> bool:
        """Does position 0's acceptance over the last rounds (the window: at least WINDOW
        drafts) differ from the rounds before it by more than sampling noise explains (a
        two-proportion z-test)? Then the long memory is mostly dropped, so a change of traffic
        re-settles k within a few rounds even at batch 1, while noise keeps the long average."""
        self.window.append((n, a))
        while sum(d for d, _ in self.window) - self.window[0][0] >= self.WINDOW:
            d, acc = self.window.popleft()
            # the rounds before the window are remembered longer than the estimate's own
            # memory: the test needs a steady reference to compare the window with
            keep_before = keep ** (1 / 3)
            self.before = [self.before[0] * keep_before + d, self.before[1] * keep_before + acc]
        wd = sum(d for d, _ in self.window)
        bd = self.before[0]
        if wd < self.WINDOW or bd < self.WINDOW:
            return False
        recent, old = sum(x for _, x in self.window) / wd, self.before[1] / bd
        noise = math.sqrt(max(recent * (1 - recent), 0.05) / wd + max(old * (1 - old), 0.05) / bd)
        if abs(recent - old) > max(0.1, self.SHIFT_Z * noise):
            self.before = [0.0, 0.0]
            return True
        return False

    def observe_lengths(self, drafted_k: Iterable[int], n_accepted: Iterable[int]) -> None:
        """One round from its sequences: each drafted k tokens and had n accepted."""
        width = 0
        pairs = list(zip(drafted_k, n_accepted, strict=True))
        for k, _ in pairs:
            width = max(width, k)
        drafted, accepted = [0] * width, [0] * width
        for k, n in pairs:
            for i in range(k):
                drafted[i] += 1
                accepted[i] += 1 if n > i else 0
        if width:
            self.observe(drafted, accepted)

    def per_position(self, k: int) -> list[float]:
        """P(drafts 0..i all accepted) for i < k: measured where there are drafts enough,
        extrapolated with the conditional acceptance of the deepest measured positions."""
        out: list[float] = []
        cond_tail = self._conditional_tail()
        for i in range(k):
            d = self.drafts[i] if i < len(self.drafts) else 0.0
            prev = out[-1] if out else 1.0
            if d >= self.MIN_DRAFTS or (i == 0 and d > 0):
                a = self.accepted[i]
                p = (a + self.prior_weight * prev * cond_tail) / (d + self.prior_weight)
                out.append(min(p, prev))
            else:
                out.append(prev * cond_tail)
        return out

    def _conditional_tail(self) -> float:
        """P(position i accepted | i-1 accepted) over the measured positions (pooled)."""
        num = den = 0.0
        for i in range(len(self.drafts)):
            if self.drafts[i] < self.MIN_DRAFTS:
                break
            reach = (
                self.drafts[i]
                if i == 0
                else self.accepted[i - 1] * (self.drafts[i] / max(self.drafts[i - 1], 1e-9))
            )
            num += self.accepted[i]
            den += reach
        if den <= 0:
            return self.prior
        return (num + self.prior_weight * self.prior) / (den + self.prior_weight)

    def alpha(self) -> float:
        return self._conditional_tail()

    def to_json(self) -> dict:
        return {
            "per_position": [round(p, 4) for p in self.per_position(len(self.drafts))],
            "alpha": round(self.alpha(), 4),
            "rounds": self.rounds,
        }
