"""/metrics under vLLM's names (`vllm:`), beside Tandem's: the same counters through the real
aggregator path, per pipeline with `model_name`; and the Grafana dashboards under compose/
read only names /metrics exports."""

import json
import re
import time
from pathlib import Path

import pytest
from django.test import Client

from fleet.telemetry.aggregator import Aggregator
from fleet.telemetry.ingest import client, encode
from fleet.telemetry.registry import load_registry
from fleet.telemetry.snapshot import LIVE_KEY
from tests.telemetry import factories as f
from tests.telemetry.test_metrics import _one, _samples

pytestmark = pytest.mark.django_db

DASHBOARDS = Path(__file__).resolve().parents[2] / "compose" / "grafana" / "dashboards"
SPEC = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


@pytest.fixture
def fleet():
    """ "chat": two verifiers and a drafter that reports running requests of its own (a
    drafter's gauges are not the engine's); "sim": one simulated verifier; "lone": a verifier
    placed nowhere (no model name: left out of the vllm: names)."""
    chat, sim = f.pipeline(name="chat"), f.pipeline(name="sim")
    v1, v2, d = f.node(name="gpu-1"), f.node(name="gpu-2"), f.node(name="sram-1")
    s, lone = f.node(name="sim-gpu-1", simulated=True), f.node(name="gpu-lone")
    for (n, _), p, role in ((v1, chat, "verify"), (v2, chat, "verify"), (d, chat, "draft")):
        f.place(n, p, role)
    f.place(s[0], sim, "verify")
    agg = Aggregator()
    agg.set_registry(load_registry())
    now = time.time()
    for i in range(3):
        for (n, token), sample in (
            (v1, f.verify_sample(ts=now + i)),
            (v2, f.verify_sample(ts=now + i, num_accepted_tokens_per_pos=[9, 6, 5, 4])),
            (s, f.verify_sample(ts=now + i)),
            (lone, f.verify_sample(ts=now + i)),
            (d, f.draft_sample(ts=now + i, num_requests_running=5)),
        ):
            agg.ingest_entry(encode(n.id, sample, key=f.key_of(n.id, token)), now=now + i)
    client().hset(LIVE_KEY, mapping=agg.build(now + 2.5)["snapshot"])


def _scrape(settings, path="/metrics") -> dict:
    settings.METRICS_TOKEN = ""
    response = Client(REMOTE_ADDR="127.0.0.1").get(path)
    assert response.status_code == 200
    return _samples(response.content.decode())


def _tandem_verify_sum(s, name, pipeline, **labels) -> float:
    return sum(
        x.value
        for x in s[name]
        if x.labels.get("pipeline") == pipeline
        and x.labels.get("role") == "verify"
        and all(x.labels.get(k) == v for k, v in labels.items())
    )


@pytest.mark.parametrize("path", ["/metrics", "/metrics?per_node=1"])
def test_vllm_names_carry_the_same_counters_per_pipeline(settings, fleet, path):
    s = _scrape(settings, path)
    chat = {"model_name": "chat", "pipeline": "chat", "simulated": "false"}
    assert _one(s, "vllm:spec_decode_num_drafts_total", **chat) == 60  # 2 verifiers x 3 x 10
    assert _one(s, "vllm:spec_decode_num_draft_tokens_total", **chat) == 240
    assert _one(s, "vllm:spec_decode_num_accepted_tokens_total", **chat) == 144
    per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    assert [_one(s, per_pos, position=str(p), **chat) for p in range(4)] == [51, 39, 30, 24]
    assert _one(s, "vllm:generation_tokens_total", **chat) == 204
    assert _one(s, "vllm:num_requests_running", **chat) == 16  # not the drafter's 5
    assert _one(s, "vllm:num_requests_waiting", **chat) == 4
    assert _one(s, "vllm:inter_token_latency_seconds_count", **chat) == 24
    assert _one(s, "vllm:inter_token_latency_seconds_bucket", le="+Inf", **chat) == 24
    assert "vllm:time_to_first_token_seconds_bucket" in s
    # Every vllm: figure is the sum of Tandem's own verifier series of the pipeline.
    for name in (*(f"spec_decode_{n}_total" for n in SPEC), "generation_tokens_total"):
        assert _one(s, "vllm:" + name, **chat) == _tandem_verify_sum(s, "tandem:" + name, "chat")
    for p in range(4):
        assert _one(s, per_pos, position=str(p), **chat) == _tandem_verify_sum(
            s, "tandem:spec_decode_num_accepted_tokens_per_pos_total", "chat", position=str(p)
        )
    sim = {"model_name": "sim", "pipeline": "sim", "simulated": "true"}
    assert _one(s, "vllm:spec_decode_num_drafts_total", **sim) == 30
    models = {x.labels["model_name"] for x in s["vllm:spec_decode_num_drafts_total"]}
    assert models == {"chat", "sim"}  # gpu-lone is in no pipeline
    assert not [x for k, xs in s.items() if k.startswith("vllm:") for x in xs if "node" in x.labels]


def test_vllm_names_with_no_aggregator(settings, db):
    s = _scrape(settings)
    assert "vllm:spec_decode_num_drafts_total" not in s  # no series, no made-up zeros
    assert "tandem:telemetry_samples_total" in s


NAME = re.compile(r"\b(?:vllm|tandem):[A-Za-z0-9_:]+")
BY = re.compile(r"\b(?:by|ignoring|on)\s*\(([^)]*)\)")
MATCHER = re.compile(r"\{([^}]*)\}")


def _queries(dashboard: dict) -> list[str]:
    out = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        out.append(query["query"] if isinstance(query, dict) else str(query or ""))
    return [q for q in out if q]


def test_dashboards_read_only_exported_metrics(settings, fleet):
    """Every dashboard under compose/grafana/dashboards parses, and each query names metrics
    and labels that /metrics exports (per pipeline, the default)."""
    s = _scrape(settings)
    labels_of = {name: {k for x in xs for k in x.labels} for name, xs in s.items()}
    files = sorted(DASHBOARDS.glob("*.json"))
    assert {p.name for p in files} >= {"tandem.json", "vllm-spec-decode.json"}
    for path in files:
        dashboard = json.loads(path.read_text())
        queries = _queries(dashboard)
        assert queries, path.name
        for query in queries:
            names = NAME.findall(query)
            assert names, (path.name, query)
            missing = [n for n in names if n not in s]
            assert not missing, (path.name, missing)
            known = set().union(*(labels_of[n] for n in names))
            used = {x.strip() for g in BY.findall(query) for x in g.split(",") if x.strip()}
            used |= {
                m.split("=")[0].strip().rstrip("!~")
                for g in MATCHER.findall(query)
                for m in g.split(",")
                if "=" in m
            }
            assert used <= known, (path.name, query, used - known)
    vllm = json.loads((DASHBOARDS / "vllm-spec-decode.json").read_text())
    exprs = " ".join(_queries(vllm))
    for needed in (*(f"vllm:spec_decode_{n}_total" for n in SPEC), "per_pos_total"):
        assert needed in exprs
