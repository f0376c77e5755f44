"""vLLM's metric names on `/metrics`, beside Tandem's own: the same counters, so that
`vllm bench serve`, vLLM's Grafana dashboards and scrapers written for vLLM (or llama.cpp,
which adopted the spec-decode set) read a Tandem fleet unchanged.

One series per pipeline and class, labelled as vLLM labels an engine: `model_name` (the
name clients send as `model` to `/v1`, which in Tandem is the pipeline's name), plus
`pipeline` and `simulated` (Tandem's own labels, so a query may join the two name sets).
vLLM's `engine` label has no counterpart: a pipeline's verifier nodes are summed (the
verifier is what vLLM calls the engine; drafter nodes count no drafts or tokens).

Only the names Tandem has measured data for:
- counters `vllm:spec_decode_num_drafts_total`, `..._num_draft_tokens_total`,
  `..._num_accepted_tokens_total`, `..._num_accepted_tokens_per_pos_total{position}` and
  `vllm:generation_tokens_total`;
- histograms `vllm:time_to_first_token_seconds` and `vllm:inter_token_latency_seconds`
  (Tandem's buckets, which are not vLLM's: histogram_quantile() reads either);
- gauges `vllm:num_requests_running`, `vllm:num_requests_waiting`.
Not exported (no data behind them): prompt tokens, e2e/queue/prefill times, KV-cache usage.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

V = "vllm:"
LABELS = ["model_name", "pipeline", "simulated"]


def _sum(into: list, values) -> None:
    for i, value in enumerate(values):
        if i < len(into):
            into[i] += value
        else:
            into.append(value)


class _Engine:
    """The verifier figures of one (pipeline, class), summed over its series."""

    def __init__(self):
        self.counters: dict[str, float] = {}
        self.per_pos: list[float] = []
        self.ttft: list[float] = []
        self.itl: list[float] = []
        self.ttft_sum = self.itl_sum = 0.0
        self.fresh = 0
        self.running = self.waiting = 0.0

    def add(self, one) -> None:
        for name, value in one.counters.items():
            self.counters[name] = self.counters.get(name, 0.0) + value
        _sum(self.per_pos, one.per_pos)
        _sum(self.ttft, one.ttft)
        _sum(self.itl, one.itl)
        self.ttft_sum += one.ttft_sum
        self.itl_sum += one.itl_sum
        self.fresh += one.fresh
        self.running += one.running
        self.waiting += one.waiting


def engines(series: Mapping[tuple, Any]) -> dict[tuple[str, str], _Engine]:
    """(pipeline, simulated) -> the sum of its verifier series. `series` is the collector's:
    label tuples (pipeline, [node,] role, simulated) -> _Series. Nodes in no pipeline are
    left out (no model name to give them)."""
    out: dict[tuple[str, str], _Engine] = {}
    for lv, one in series.items():
        pipe, role, sim = lv[0], lv[-2], lv[-1]
        if not pipe or role != "verify":
            continue
        out.setdefault((pipe, sim), _Engine()).add(one)
    return out


def families(series: Mapping[tuple, Any], cumulative) -> Iterator:
    """The vLLM-named families of the collector's series; `cumulative(counts)` turns a
    histogram's per-bucket counts into Prometheus' (le, cumulative count) pairs."""
    counters = {
        key: CounterMetricFamily(V + name, doc, labels=LABELS)
        for key, name, doc in (
            ("num_drafts", "spec_decode_num_drafts", "Number of spec decoding drafts."),
            ("num_draft_tokens", "spec_decode_num_draft_tokens", "Number of draft tokens."),
            (
                "num_accepted_tokens",
                "spec_decode_num_accepted_tokens",
                "Number of accepted tokens.",
            ),
            ("generation_tokens", "generation_tokens", "Number of generation tokens processed."),
        )
    }
    per_pos = CounterMetricFamily(
        V + "spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        labels=[*LABELS, "position"],
    )
    ttft = HistogramMetricFamily(
        V + "time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        labels=LABELS,
    )
    itl = HistogramMetricFamily(
        V + "inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        labels=LABELS,
    )
    running = GaugeMetricFamily(
        V + "num_requests_running", "Number of requests in model execution batches.", labels=LABELS
    )
    waiting = GaugeMetricFamily(
        V + "num_requests_waiting", "Number of requests waiting to be processed.", labels=LABELS
    )
    for (pipe, sim), engine in sorted(engines(series).items()):
        lv = [pipe, pipe, sim]
        for key, family in counters.items():
            family.add_metric(lv, engine.counters.get(key, 0.0))
        for position, value in enumerate(engine.per_pos):
            per_pos.add_metric([*lv, str(position)], value)
        ttft.add_metric(lv, cumulative(engine.ttft), engine.ttft_sum)
        itl.add_metric(lv, cumulative(engine.itl), engine.itl_sum)
        if engine.fresh:
            running.add_metric(lv, engine.running)
            waiting.add_metric(lv, engine.waiting)
    yield from counters.values()
    yield from (per_pos, ttft, itl, running, waiting)
