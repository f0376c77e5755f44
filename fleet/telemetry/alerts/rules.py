"""The 11 rules of compose/prometheus/alerts.yml as Tandem reads them, for the /alerts page:
name, severity and `for:` as in the file (tests/telemetry/test_alerts_fleetwide.py holds them
equal), and in a sentence what Tandem evaluates instead of the PromQL."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    name: str
    severity: str
    hold: str  # alerts.yml's `for:`, "" for none
    reads: str
    prometheus_only: str = ""  # the part of the rule Tandem cannot see from inside


def _burn(kind: str, slow: bool) -> str:
    if slow:
        return (
            f"The median {kind} p99 of the pipeline's rollups over its SLO for both the last "
            "30 min (10 s buckets) and 6 h (5 min buckets), at every minute of the last 15."
        )
    return (
        f"The median {kind} p99 of the pipeline's 10 s rollups over its SLO for both the last "
        "5 min and the last hour; fires without waiting the 2 m."
    )


RULES: tuple[Rule, ...] = (
    Rule(
        "TandemNodeLost",
        "page",
        "1m",
        "Each placed node marked lost, or whose last heartbeat is older than the liveness "
        "window (heartbeat period x tolerance): at once, the window standing in for the 1 m.",
    ),
    Rule(
        "TandemTelemetryLag",
        "page",
        "1m",
        "The aggregator's last tick in Redis's live snapshot is over 30 s + 1 m old.",
    ),
    Rule(
        "TandemTelemetryDropped",
        "ticket",
        "10m",
        "Samples dropped in the last 5 min over 10 % of those taken (the aggregator's counters "
        "as each evaluation saw them); pending 10 min before it fires.",
    ),
    Rule(
        "TandemSupervisedChildGivenUp",
        "page",
        "",
        "A child of manage.py up in state failed (the supervisor's state file).",
    ),
    Rule(
        "TandemMetricsDown",
        "page",
        "2m",
        "Redis unreachable, or no aggregator tick in its live snapshot (what /metrics would "
        "then answer without); pending 2 min before it fires.",
        prometheus_only='The web process down (up{job="tandem"} == 0): a Tandem that '
        "evaluates this rule is up.",
    ),
    Rule(
        "TandemPipelineNoGoodput",
        "page",
        "2m",
        "Every 10 s rollup of the pipeline in the last 2 min shows requests waiting and no "
        "tokens delivered.",
    ),
    Rule(
        "TandemAcceptanceCollapse",
        "ticket",
        "10m",
        "Every 10 s rollup of the pipeline in the last 10 min has its acceptance under half "
        "of its 6 h mean.",
    ),
    Rule("TandemITLSLOBurnFast", "page", "2m", _burn("ITL", slow=False)),
    Rule("TandemITLSLOBurnSlow", "ticket", "15m", _burn("ITL", slow=True)),
    Rule("TandemTTFTSLOBurnFast", "page", "2m", _burn("TTFT", slow=False)),
    Rule("TandemTTFTSLOBurnSlow", "ticket", "15m", _burn("TTFT", slow=True)),
)
