"""/metrics families the alert rules (compose/prometheus/alerts.yml) compare against: each
pipeline's latency SLOs as gauges, and the children `manage.py up` supervises. Read from the
database and the supervisor's state file at each scrape (a few rows), beside the live snapshot's
families (metrics.py)."""

from __future__ import annotations

from django.conf import settings
from django.db import DatabaseError
from prometheus_client.core import GaugeMetricFamily

from fleet.pipelines.models import Pipeline
from fleet.runtime.supervision import PROBLEM_STATES, read_state

P = "tandem:"


def _flag(value) -> str:
    return "true" if value else "false"


class SloCollector:
    """tandem:pipeline_slo_{itl,ttft}_p99_seconds{pipeline, simulated} (pipelines with the
    SLO set) and tandem:supervised_child_up{child, state} (0 restarting or given up on:
    `state="failed"` is `up` giving up; 1 otherwise)."""

    def collect(self):
        itl = GaugeMetricFamily(
            P + "pipeline_slo_itl_p99_seconds",
            "The pipeline's inter-token latency p99 SLO.",
            labels=["pipeline", "simulated"],
        )
        ttft = GaugeMetricFamily(
            P + "pipeline_slo_ttft_p99_seconds",
            "The pipeline's time-to-first-token p99 SLO.",
            labels=["pipeline", "simulated"],
        )
        try:
            rows = list(
                Pipeline.objects.values_list(
                    "name", "simulated", "slo_itl_p99_ms", "slo_ttft_p99_ms"
                )
            )
        except DatabaseError:  # the scrape still answers with the live families
            rows = []
        for name, simulated, itl_ms, ttft_ms in rows:
            if itl_ms is not None:
                itl.add_metric([name, _flag(simulated)], itl_ms / 1000.0)
            if ttft_ms is not None:
                ttft.add_metric([name, _flag(simulated)], ttft_ms / 1000.0)
        yield itl
        yield ttft
        children = GaugeMetricFamily(
            P + "supervised_child_up",
            "0 while a child of `manage.py up` is restarting or given up on (state=failed).",
            labels=["child", "state"],
        )
        for child in (read_state(settings.DATA_DIR) or {}).get("children", []):
            state = str(child.get("state", ""))
            children.add_metric(
                [str(child.get("name", "")), state], 0.0 if state in PROBLEM_STATES else 1.0
            )
        yield children
