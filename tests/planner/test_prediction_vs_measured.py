"""The planner's prediction for a live pipeline's current configuration against what the
pipeline measured at the same k and batch (issue 14: 587 tok/s predicted, ~310-380 tok/s
measured, no measured row beside it).

`demo` is driven as `manage.py up` runs it: its drafter and verifier are real
`manage.py run_node --demo` worker processes on the trained demo pair, fed by a closed loop
of concurrent generations through the generation service. Their signed samples go through
the real aggregator core (`Aggregation`, reading the Redis stream) into 10 s rollups; the
planner then reads those rollups as it does in production (curves, per-position acceptance,
the serving path's per-round overhead) and its prediction for the current k and batch is
compared with the measured goodput. The figures are printed (run with -s to see them).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from fleet.nodes.models import Node
from fleet.pipelines.models import Pipeline
from fleet.planner import services
from fleet.planner.model import predict
from fleet.telemetry import rollups
from fleet.telemetry.aggregation import Aggregation
from fleet.telemetry.ingest import STREAMS, client, unpack
from fleet.telemetry.registry import load_registry
from inference.selectors import stream_of

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

CONCURRENCY = 8  # sequences in flight: the verifier batches them
MAX_TOKENS = 64
LOAD_S = float(os.environ.get("TANDEM_PLANNER_E2E_LOAD_S", "70"))
PROMPTS = [
    "def main(",
    "import os\n",
    "class Parser:",
    "for i in range(",
    "    return self.",
    "if __name__ == ",
    "def __init__(self, ",
    "with open(path) as f:",
]


def _demo_models_here() -> None:
    """The test run has its own data directory: link the trained demo pair into it."""
    from inference.training.demo_pair import pair_exists

    trained = Path(settings.BASE_DIR) / "data" / "models"
    if not pair_exists(trained):
        pytest.skip("the demo pair is not trained in data/models (make up trains it)")
    models = Path(settings.DATA_DIR) / "models"
    models.mkdir(parents=True, exist_ok=True)
    for entry in trained.iterdir():
        link = models / entry.name
        if not link.exists():
            link.symlink_to(entry.resolve())


class StreamAggregator(threading.Thread):
    """The aggregator's core on the live stream: what `manage.py aggregate` does, minus the
    websockets (rollup rows are collected, written by the test thread)."""

    def __init__(self, node_ids: set[int]):
        super().__init__(daemon=True)
        self.node_ids = node_ids
        self.agg = Aggregation()
        self.agg.set_registry(load_registry())
        self.rows: list[dict] = []
        self.stop = threading.Event()
        start = f"{int(time.time() * 1000)}-0"
        self.cursors: Any = dict.fromkeys(STREAMS, start)

    def run(self) -> None:
        r = client()
        while not self.stop.is_set():
            streams: Any = r.xread(self.cursors, count=2000, block=200) or []
            for stream, entries in streams:
                for entry_id, fields in entries:
                    self.cursors[stream.decode()] = entry_id
                    if int(unpack(fields)["node"]) in self.node_ids:
                        self.agg.ingest_entry(fields, now=time.time())
            self.rows += self.agg.close_buckets(time.time())


def _closed_loop(pipeline: Pipeline, until: float, errors: list) -> None:
    """One client: a new generation as soon as the previous one ended."""
    from inference import services as generation_services
    from inference import wire
    from inference.serving import tokenization

    tok = tokenization.load(pipeline.target_model)
    i = 0
    try:
        while time.monotonic() < until:
            prompt = PROMPTS[i % len(PROMPTS)]
            i += 1
            g = generation_services.generation_submit(
                pipeline=pipeline,
                prompt=prompt,
                prompt_tokens=tok.encode(prompt),
                params={"temperature": 0, "max_tokens": MAX_TOKENS},
                user=None,
            )
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                events = stream_of(g.pk)
                if events and events[-1][1]["type"] in wire.TERMINAL_TYPES:
                    break
                time.sleep(0.02)
            else:
                errors.append(f"generation {g.pk} did not end in 120 s")
                return
    except Exception as exc:  # reported by the test thread
        errors.append(repr(exc))
    finally:
        connection.close()


def test_demo_prediction_beside_measured(tmp_path, live_server):
    from inference.local_nodes import local_node_ensure
    from tests.worker.helpers import Workers, wait_online

    _demo_models_here()
    d_id, d_token = local_node_ensure(pipeline="demo", role="draft")
    v_id, v_token = local_node_ensure(pipeline="demo", role="verify")
    # one fixed k: the claim is about the prediction at the configuration that ran (the
    # local demo pipeline ships adaptive, whose k moves round by round)
    from fleet.pipelines.services import pipeline_set_k_policy

    demo = Pipeline.objects.get(name="demo")
    pipeline_set_k_policy(pipeline_id=demo.pk, actor="test", k_policy={"mode": "fixed", "k": 4})
    pipeline = Pipeline.objects.get(name="demo")
    nodes = [
        (Node.objects.get(pk=d_id), "draft", d_token),
        (Node.objects.get(pk=v_id), "verify", v_token),
    ]
    aggregator = StreamAggregator({d_id, v_id})
    aggregator.start()
    errors: list[str] = []
    with Workers(tmp_path, api_url=live_server.url) as workers:
        for node, role, token in nodes:
            workers.start(node, role, token)
        wait_online(nodes, workers, timeout=120)
        until = time.monotonic() + LOAD_S
        clients = [
            threading.Thread(target=_closed_loop, args=(pipeline, until, errors))
            for _ in range(CONCURRENCY)
        ]
        for c in clients:
            c.start()
        for c in clients:
            c.join(LOAD_S + 180)
        assert not errors, f"{errors[:3]}\n{workers.logs()}"
    aggregator.stop.set()
    aggregator.join(10)
    rollups.write(aggregator.rows)
    if os.environ.get("TANDEM_PLANNER_E2E_DUMP"):  # the rollups, for a look at the fit
        import json

        Path(os.environ["TANDEM_PLANNER_E2E_DUMP"]).write_text(
            json.dumps(aggregator.rows, default=str)
        )

    rec = services.recommendation(pipeline=pipeline)
    assert rec["available"] is True
    ms = rec["measured"]
    assert ms is not None, f"no loaded bucket measured: {aggregator.rows}"
    pred = ms["prediction"]
    # the same model without the serving path's per-round overhead: the engine's step times
    # alone (what the planner predicted before; issue 14 saw 587 against ~350 measured)
    engine_only = predict(
        services.context(pipeline=pipeline).model.with_(overhead_curve=None),
        k=ms["k"],
        batch=ms["batch"],
    ).goodput_tps
    load = os.getloadavg()
    print(
        f"\ndemo k={ms['k']} batch={ms['batch']:.2f} over {ms['buckets']} loaded 10 s buckets: "
        f"measured {ms['goodput_tps']:.1f} tok/s, predicted {pred['goodput_tps']:.1f} tok/s "
        f"(error {ms['goodput_error_pct']:+.1f}%; forward passes alone {engine_only:.1f} tok/s, "
        f"{(engine_only / ms['goodput_tps'] - 1) * 100:+.1f}%); "
        f"ITL measured {ms['itl_ms']:.2f} ms, predicted {pred['itl_ms']:.2f} ms; "
        f"power measured {ms['power_w']:.0f} W ({ms['power_source']}), "
        f"predicted {pred['power_w']:.0f} W; sources {rec['sources']}; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    # The accuracy figure is `manage.py bench_control`'s planner_apply_error_max_pct: on a
    # shared 2-core machine the measured side swings with the load (24 % once on a CI pass,
    # +0.3 % and +61 % in two runs of this test on one day), and a timed test must not flake.
    # What holds whatever the load: the measured row is the configuration that ran, beside a
    # prediction for that same k and batch, from measured inputs.
    assert ms["k"] == 4 and ms["buckets"] >= 1
    assert pred["k"] == 4 and pred["goodput_tps"] > 0 and ms["goodput_error_pct"] is not None
    assert rec["sources"]["alpha"] == "measured" and rec["sources"]["overhead"] == "measured"
