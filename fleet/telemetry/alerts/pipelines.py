"""The pipeline rules of compose/prometheus/alerts.yml, from the pipelines' rollups:
TandemPipelineNoGoodput, TandemAcceptanceCollapse and the four ITL / TTFT SLO burns.

/metrics exports the live window's figures (`tandem:pipeline_tokens_per_s`,
`tandem:pipeline_acceptance_rate`, the latency histograms); the rollups hold the same figures
(`accumulators.derive`, the same code) per 10 s and 5 min bucket: the history that a `for:` or
a `[6h]` needs. Where Tandem's reading differs from Prometheus's:
- no goodput: every 10 s bucket of the last 2 min (the rule's `for:`) shows requests waiting
  and no tokens delivered, at least NO_GOODPUT_MIN_BUCKETS of them (a pipeline that sends no
  samples writes no rollups: its nodes are then lost, which is their own alert);
- acceptance collapse: every measured 10 s bucket of the last 10 min (the `for:`) is under half
  the pipeline's 6 h mean (time-weighted: its 5 min buckets, then the 10 s ones after the last
  of those); the buckets must cover the 10 min (COLLAPSE_MIN_BUCKETS of them, the first within
  COLLAPSE_GRACE of its start);
- SLO burns: a rollup keeps its bucket's p99, not the histogram, so "the p99 over a window is
  over the SLO" reads "the median bucket p99 of the window is" (at least SLO_MIN_BUCKETS
  measured): 10 s buckets for 5 min, 30 min and 1 h, 5 min buckets for 6 h. Both windows of a
  rule must burn, as in the rule. The slow burn's `for: 15m` is checked on the history (at
  every minute of the last 15, both windows ending there); the fast burn's `for: 2m` is not
  waited for (its 5 min window already needs three buckets over the SLO).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from fleet.pipelines.models import Pipeline
from fleet.telemetry.alerts.base import Alert
from fleet.telemetry.models import Rollup, Scope

NO_GOODPUT_WINDOW = timedelta(minutes=2)  # alerts.yml: for: 2m
NO_GOODPUT_MIN_BUCKETS = 3
SLO_WINDOW = timedelta(minutes=5)  # the fast burn's short window
SLO_LONG_WINDOW = timedelta(hours=1)  # ... and its long one
SLOW_WINDOW = timedelta(minutes=30)  # the slow burn's short window
SLOW_LONG_WINDOW = timedelta(hours=6)  # ... and its long one (5 min buckets)
SLOW_FOR = timedelta(minutes=15)  # alerts.yml: for: 15m
HOLD_STEP = timedelta(minutes=1)
SLO_MIN_BUCKETS = 3
COLLAPSE_FOR = timedelta(minutes=10)  # alerts.yml: for: 10m
COLLAPSE_MEAN_WINDOW = timedelta(hours=6)
COLLAPSE_SHARE = 0.5
COLLAPSE_MIN_BUCKETS = 30  # of the 60 10 s buckets in COLLAPSE_FOR
COLLAPSE_GRACE = timedelta(minutes=1)
# 10 s rows read for a pipeline without an SLO: the collapse's 10 min and the tail after the
# last 5 min bucket (written when it closes)
RECENT = COLLAPSE_FOR + timedelta(minutes=5)
LONG_S = 300

FIELDS = ("waiting", "tokens_per_s", "acceptance_rate", "itl_p99_ms", "ttft_p99_ms")
Bucket = tuple[datetime, dict]


def _buckets(ids: list[int], resolution: int, since: datetime) -> dict[int, list[Bucket]]:
    """{pipeline id: [(start, {field: value})...] oldest first}: only FIELDS of each row."""
    if not ids:
        return {}
    rows = (
        Rollup.objects.filter(
            scope=Scope.PIPELINE, scope_id__in=ids, resolution_s=resolution, start__gte=since
        )
        .order_by("start")
        .values_list("scope_id", "start", *(f"data__{f}" for f in FIELDS))
    )
    out: dict[int, list[Bucket]] = {}
    for pid, start, *values in rows:
        out.setdefault(pid, []).append((start, dict(zip(FIELDS, values, strict=True))))
    return out


def _window(buckets: list[Bucket], end: datetime, span: timedelta) -> list[dict]:
    return [data for start, data in buckets if end - span <= start <= end]


def no_goodput(buckets: list[dict]) -> bool:
    """Requests waiting and nothing delivered in every bucket (enough of them to tell)."""
    if len(buckets) < NO_GOODPUT_MIN_BUCKETS:
        return False
    return all((b.get("waiting") or 0) > 0 and not (b.get("tokens_per_s") or 0) for b in buckets)


def slo_burning(buckets: list[dict], field: str, slo_ms: float | None) -> float | None:
    """The median bucket p99 (ms) when more than half of the measured buckets are over the
    SLO, else None."""
    if slo_ms is None:
        return None
    values = sorted(v for b in buckets if (v := b.get(field)) is not None)
    if len(values) < SLO_MIN_BUCKETS:
        return None
    over = sum(1 for v in values if v > slo_ms)
    return values[len(values) // 2] if over * 2 > len(values) else None


def fast_burn(ten: list[Bucket], field: str, slo_ms: float, now: datetime) -> float | None:
    """The 5 min window's median p99 when it and the last hour's burn, else None."""
    p99 = slo_burning(_window(ten, now, SLO_WINDOW), field, slo_ms)
    if p99 is None or slo_burning(_window(ten, now, SLO_LONG_WINDOW), field, slo_ms) is None:
        return None
    return p99


def slow_burn(
    ten: list[Bucket], five: list[Bucket], field: str, slo_ms: float, now: datetime
) -> float | None:
    """The 30 min window's median p99 when it and the 6 h one have burnt at every minute of
    the last SLOW_FOR, else None."""
    steps = int(SLOW_FOR / HOLD_STEP)
    found = None
    for i in range(steps + 1):
        end = now - i * HOLD_STEP
        p99 = slo_burning(_window(ten, end, SLOW_WINDOW), field, slo_ms)
        if p99 is None or slo_burning(_window(five, end, SLOW_LONG_WINDOW), field, slo_ms) is None:
            return None
        found = p99 if found is None else found
    return found


def mean_acceptance(ten: list[Bucket], five: list[Bucket], now: datetime) -> float | None:
    """avg_over_time(acceptance[6h]) from the rollups, time-weighted: the 5 min buckets of the
    window, then the 10 s buckets after the last of them."""
    since = now - COLLAPSE_MEAN_WINDOW
    total = weight = 0.0
    tail_from = since
    for start, data in five:
        tail_from = max(tail_from, start + timedelta(seconds=LONG_S))
        if start >= since and (value := data.get("acceptance_rate")) is not None:
            total, weight = total + value * LONG_S, weight + LONG_S
    for start, data in ten:
        if start >= tail_from and (value := data.get("acceptance_rate")) is not None:
            total, weight = total + value * 10, weight + 10
    return total / weight if weight else None


def acceptance_collapse(
    ten: list[Bucket], five: list[Bucket], now: datetime
) -> tuple[float, float] | None:
    """(the latest acceptance, the 6 h mean) when every measured 10 s bucket of the last
    COLLAPSE_FOR is under COLLAPSE_SHARE of the mean, else None."""
    since = now - COLLAPSE_FOR
    recent = [
        (start, value)
        for start, data in ten
        if since <= start <= now and (value := data.get("acceptance_rate")) is not None
    ]
    if len(recent) < COLLAPSE_MIN_BUCKETS or recent[0][0] > since + COLLAPSE_GRACE:
        return None
    mean = mean_acceptance(ten, five, now)
    if not mean or any(value >= COLLAPSE_SHARE * mean for _, value in recent):
        return None
    return recent[-1][1], mean


def _over(kind: str, p99: float, slo_ms: float) -> str:
    return f"{kind} p99 {p99:g} ms, over its SLO of {slo_ms:g} ms"


def pipeline_alerts(now: datetime) -> list[Alert]:
    pipelines = list(Pipeline.objects.only("id", "name", "slo_itl_p99_ms", "slo_ttft_p99_ms"))
    if not pipelines:
        return []
    with_slo = [
        p.pk for p in pipelines if p.slo_itl_p99_ms is not None or p.slo_ttft_p99_ms is not None
    ]
    others = [p.pk for p in pipelines if p.pk not in set(with_slo)]
    tens = _buckets(with_slo, 10, now - SLO_LONG_WINDOW) | _buckets(others, 10, now - RECENT)
    fives = _buckets([p.pk for p in pipelines], LONG_S, now - SLOW_LONG_WINDOW - SLOW_FOR)
    out = []
    for p in pipelines:
        ten, five = tens.get(p.pk, []), fives.get(p.pk, [])
        if no_goodput(_window(ten, now, NO_GOODPUT_WINDOW)):
            out.append(
                Alert(
                    key=f"no_goodput:{p.pk}",
                    name="TandemPipelineNoGoodput",
                    severity="page",
                    summary=f"{p.name} delivers no tokens while requests wait",
                    pipeline_id=p.pk,
                )
            )
        collapsed = acceptance_collapse(ten, five, now)
        if collapsed is not None:
            latest, mean = collapsed
            out.append(
                Alert(
                    key=f"acceptance_collapse:{p.pk}",
                    name="TandemAcceptanceCollapse",
                    severity="ticket",
                    summary=f"{p.name}: acceptance {latest:.0%}, under half its 6 h mean "
                    f"of {mean:.0%}",
                    pipeline_id=p.pk,
                )
            )
        for kind, field, slo_ms in (
            ("ITL", "itl_p99_ms", p.slo_itl_p99_ms),
            ("TTFT", "ttft_p99_ms", p.slo_ttft_p99_ms),
        ):
            if slo_ms is None:
                continue
            p99 = fast_burn(ten, field, slo_ms, now)
            if p99 is not None:
                out.append(
                    Alert(
                        key=f"{kind.lower()}_slo:{p.pk}",
                        name=f"Tandem{kind}SLOBurnFast",
                        severity="page",
                        summary=f"{p.name}: {_over(kind, p99, slo_ms)} for the last hour and now",
                        pipeline_id=p.pk,
                    )
                )
            p99 = slow_burn(ten, five, field, slo_ms, now)
            if p99 is not None:
                out.append(
                    Alert(
                        key=f"{kind.lower()}_slo_slow:{p.pk}",
                        name=f"Tandem{kind}SLOBurnSlow",
                        severity="ticket",
                        summary=f"{p.name}: {_over(kind, p99, slo_ms)} for 6 hours",
                        pipeline_id=p.pk,
                    )
                )
    return out
