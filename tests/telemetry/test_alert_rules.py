"""The alerting rules shipped for compose's Prometheus (compose/prometheus/alerts.yml): they
load (`promtool check rules`, when promtool is installed), Prometheus is told to load them,
and every metric and label they read is one /metrics exports, the SLOs and the supervised
children included (fleet/telemetry/metrics_slo.py)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from fleet.pipelines.models import Pipeline
from fleet.runtime.supervision import state_path, write_state
from tests.telemetry.test_metrics_vllm import BY, MATCHER, NAME, _scrape, fleet  # noqa: F401

pytestmark = pytest.mark.django_db

COMPOSE = Path(__file__).resolve().parents[2] / "compose"
RULES = COMPOSE / "prometheus" / "alerts.yml"
# what the issue asks an operator's rules to cover
WANTED = {
    "TandemNodeLost",
    "TandemPipelineNoGoodput",
    "TandemITLSLOBurnFast",
    "TandemITLSLOBurnSlow",
    "TandemTTFTSLOBurnFast",
    "TandemTTFTSLOBurnSlow",
    "TandemAcceptanceCollapse",
    "TandemTelemetryLag",
    "TandemSupervisedChildGivenUp",
    "TandemMetricsDown",
}
SUFFIX = ("_bucket", "_count", "_sum")


def _rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_prometheus_loads_the_rules():
    config = yaml.safe_load((COMPOSE / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    compose = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    volumes = compose["services"]["prometheus"]["volumes"]
    assert "./prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in volumes
    rules = _rules()
    assert {r["alert"] for r in rules} >= WANTED
    for rule in rules:
        assert rule["labels"]["severity"] in ("page", "ticket"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_checks_the_rules():
    done = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout


def test_the_rules_read_only_what_metrics_exports(settings, fleet, tmp_path):  # noqa: F811
    Pipeline.objects.filter(name="chat").update(slo_itl_p99_ms=60.0, slo_ttft_p99_ms=400.0)
    settings.DATA_DIR = tmp_path
    child = {"name": "node-verify", "state": "failed", "pid": None, "since": time.time()}
    write_state(state_path(tmp_path), {"children": [child]})
    s = _scrape(settings)
    labels_of = {name: {k for x in xs for k in x.labels} for name, xs in s.items()}
    for rule in _rules():
        expr = rule["expr"]
        names = [n for n in NAME.findall(expr)]
        assert names, rule["alert"]
        missing = [n for n in names if n not in s]
        assert not missing, (rule["alert"], missing)
        known = set().union(*(labels_of[n] for n in names)) | {"le"}
        used = {x.strip() for g in BY.findall(expr) for x in g.split(",") if x.strip()}
        used |= {
            m.split("=")[0].strip().rstrip("!~")
            for g in MATCHER.findall(expr)
            for m in g.split(",")
            if "=" in m
        }
        used -= {"job"}  # Prometheus' own `up{job=...}`
        assert used <= known, (rule["alert"], used - known)
    # the SLOs the burn alerts compare against, in seconds, per pipeline
    [itl] = s["tandem:pipeline_slo_itl_p99_seconds"]
    assert (itl.labels["pipeline"], itl.value) == ("chat", pytest.approx(0.06))
    [ttft] = s["tandem:pipeline_slo_ttft_p99_seconds"]
    assert ttft.value == pytest.approx(0.4)
    [given_up] = s["tandem:supervised_child_up"]
    assert given_up.labels == {"child": "node-verify", "state": "failed"} and given_up.value == 0
