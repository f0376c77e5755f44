"""bench_control's figures read from the drafter's own inspection (its per-position acceptance,
its trace of round batches and k) and judged: the best fixed k without the winner's curse, and
the rounds adaptive k takes to settle after a phase switch."""

from __future__ import annotations

import time

from inference.engine.counters import SpecCounters


def per_position(nodes) -> list[float]:
    """P(drafts 0..i accepted) per token asked of the drafter, as its adaptive k measured it
    over its last rounds (decayed counts; a round it proposed nothing in counts as a
    rejection): the planner's and the worker's own input. The ledger's counters are vLLM's
    per-draft-made figure (an n-gram drafter's gaps look accepted), and (emitted - accepted)
    rounds also counts the rounds before the drafter joins a sequence."""
    from inference.selectors import node_inspect

    time.sleep(1.0)  # the drafter's inspection is republished within a second
    snap = (node_inspect(nodes["draft"][0].pk) or {}).get("adaptive") or {}
    return [float(p) for p in (snap.get("acceptance") or {}).get("per_position") or []]


def counters_of(rows: list[dict]) -> SpecCounters:
    """Finished generations' speculative counters (as ``Generation.counters``), merged."""
    total = SpecCounters()
    for c in rows:
        total.merge(SpecCounters.from_dict(c or {}))
    return total


def per_position_of_rows(ids: list[str], k: int) -> list[float] | None:
    """P(drafts 0..i accepted) over every draft of the finished generations `ids`, from the
    ledger's rows (vLLM's per-draft counters): for a model drafter at fixed k each draft asks
    for k tokens, so this is per token asked, over whole runs rather than the drafter's
    decayed memory of its last rounds (read once, it swung with the last run's prompts).
    None when no draft was made."""
    from inference.models import Generation

    rows = Generation.objects.filter(pk__in=ids).values_list("counters", flat=True)
    c = counters_of(list(rows))
    if not c.num_drafts:
        return None
    accepted = (c.num_accepted_tokens_per_pos + [0] * k)[:k]
    return [a / c.num_drafts for a in accepted]


def held_out_best(runs: dict, ks: list[int]) -> float | None:
    """The best fixed k's goodput without the winner's curse: the k is picked on one
    repetition and its goodput read on the other (each way round, averaged). The max of five
    noisy means is biased upward -- identical runs here differ by 12-13 % -- so adaptive k
    divided by it reads low even when it picks the right k. None with fewer than two reps."""
    reps = min(len(runs[k]) for k in ks)
    if reps < 2:
        return None
    picks = []
    for r in range(reps):
        others = {k: sum(v for i, v in enumerate(runs[k]) if i != r) for k in ks}
        best = max(ks, key=lambda k: others[k])
        picks.append(runs[best][r])
    return sum(picks) / len(picks)


def round_batches(nodes, since: float) -> list[int]:
    """The drafter's round batch sizes since `since` (its trace of the last 256 rounds)."""
    from inference.selectors import node_inspect

    time.sleep(1.0)  # the drafter's inspection is republished within a second
    trace = (node_inspect(nodes["draft"][0].pk) or {}).get("k_trace") or []
    return [int(b) for t, b, _k in trace if t >= since]


def k_rounds(nodes, since: float) -> dict[int, int]:
    """How many of the drafter's rounds since `since` drafted each k (its trace)."""
    from inference.selectors import node_inspect

    time.sleep(1.0)
    trace = (node_inspect(nodes["draft"][0].pk) or {}).get("k_trace") or []
    out: dict[int, int] = {}
    for t, _b, k in trace:
        if t >= since:
            out[int(k)] = out.get(int(k), 0) + 1
    return dict(sorted(out.items()))


def settle_rounds(trace: list, switch_at: float, *, share: float = 0.9) -> int | None:
    """Rounds after `switch_at` until k settles, for the batch sizes that carry the traffic.

    Adaptive k is chosen per batch bucket (a round of 2 sequences may rightly draft another k
    than one of 8, and a run's batch shrinks as its requests finish), so each bucket holding at
    least a quarter of the rounds after the switch is judged on its own rounds: the first round
    from which at least `share` of its rounds to the end stay within 1 of where its k ends up
    (the mode of its last half; a k between two of nearly equal worth wanders a little without
    being unsettled). The worst of those buckets, in that bucket's rounds."""
    from fleet.planner.costs import bucket

    after = [(bucket(b), k) for t, b, k in trace if t >= switch_at]
    if len(after) < 4:
        return None
    by_bucket: dict[int, list[int]] = {}
    for b, k in after:
        by_bucket.setdefault(b, []).append(k)
    worst = None
    for ks in by_bucket.values():
        if len(ks) < max(4, len(after) / 4):
            continue
        tail = ks[len(ks) // 2 :]
        final = max(set(tail), key=tail.count)
        settled = next(
            (
                i
                for i in range(len(ks))
                if sum(abs(k - final) <= 1 for k in ks[i:]) >= share * len(ks[i:])
            ),
            len(ks),
        )
        worst = settled if worst is None else max(worst, settled)
    return worst


def worthy_ks(measured: dict[int, float], *, within: float = 0.95, k_max: int = 8) -> set[int]:
    """The k in 0..k_max whose goodput, measured at the fixed k's of a cell (linear between
    them, the last one held beyond), is within `within` of the best: every k among them is
    as good a place to settle as the best, by adaptive k's own target."""
    ks = sorted(measured)
    best = max(measured.values())

    def worth(k: int) -> float:
        lo = max((m for m in ks if m <= k), default=ks[0])
        hi = min((m for m in ks if m >= k), default=ks[-1])
        if hi == lo:
            return measured[lo]
        return measured[lo] + (measured[hi] - measured[lo]) * (k - lo) / (hi - lo)

    return {k for k in range(k_max + 1) if worth(k) >= within * best}


def settle_rounds_among(
    trace: list, switch_at: float, worthy: set[int], streams: int, *, share: float = 0.9
) -> int | None:
    """Rounds after `switch_at` until adaptive k settles among the `worthy` k of the new
    phase (`worthy_ks` of its fixed-k runs at this stream count): the first round of the
    full batch from which at least `share` of them draft a worthy k. Judged on rounds of the
    stream count's batch bucket, the batch the fixed runs measured (a run's tail of 1-2
    sequences has its own best k). Unlike `settle_rounds`, moving between k of equal worth
    is not unsettled, and holding a k that loses is."""
    from fleet.planner.costs import bucket

    ks = [k for t, b, k in trace if t >= switch_at and bucket(b) == bucket(streams)]
    if len(ks) < 4:
        return None
    return next(
        (i for i in range(len(ks)) if sum(k in worthy for k in ks[i:]) >= share * len(ks[i:])),
        len(ks),
    )
