"""/metrics: vLLM-style names, DCGM-like power with measured|modeled, and who may read it."""

import time

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from fleet.telemetry.aggregator import Aggregator
from fleet.telemetry.ingest import client, encode
from fleet.telemetry.registry import load_registry
from fleet.telemetry.snapshot import LIVE_KEY
from tests.telemetry import factories as f

pytestmark = pytest.mark.django_db


def _feed(verifiers: list[tuple], drafters: list[tuple]) -> None:
    """Three seconds of samples from each (node, token); the snapshot written to Redis."""
    agg = Aggregator()
    agg.set_registry(load_registry())
    now = time.time()
    for i in range(3):
        for n, token in verifiers:
            agg.ingest_entry(
                encode(n.id, f.verify_sample(ts=now + i), key=f.key_of(n.id, token)), now=now + i
            )
        for n, token in drafters:
            agg.ingest_entry(
                encode(n.id, f.draft_sample(ts=now + i), key=f.key_of(n.id, token)), now=now + i
            )
    client().hset(LIVE_KEY, mapping=agg.build(now + 2.5)["snapshot"])


@pytest.fixture
def live():
    p = f.pipeline(name="chat")
    v, vt = f.node(name="gpu-1")
    d, dt = f.node(name="sram-1")
    f.place(v, p, "verify")
    f.place(d, p, "draft")
    _feed([(v, vt)], [(d, dt)])


@pytest.fixture
def fleet_of_three():
    """Two real verifiers and a drafter in "chat"; a simulated verifier in "sim"."""
    chat, sim = f.pipeline(name="chat"), f.pipeline(name="sim")
    v1, v2, d = f.node(name="gpu-1"), f.node(name="gpu-2"), f.node(name="sram-1")
    s = f.node(name="sim-gpu-1", simulated=True)
    for (n, _), p, role in ((v1, chat, "verify"), (v2, chat, "verify"), (d, chat, "draft")):
        f.place(n, p, role)
    f.place(s[0], sim, "verify")
    _feed([v1, v2, s], [d])


def _samples(text: str) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def _one(samples, name, **labels):
    [hit] = [s for s in samples[name] if all(s.labels.get(k) == v for k, v in labels.items())]
    return hit.value


def test_metrics_names_and_values(settings, live):
    """The per-node series (`?per_node=1`): every figure of one node, labelled with it."""
    settings.METRICS_TOKEN = ""
    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics?per_node=1")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    s = _samples(response.content.decode())
    lv = {"pipeline": "chat", "node": "gpu-1", "role": "verify"}
    assert _one(s, "tandem:spec_decode_num_drafts_total", **lv) == 30
    assert _one(s, "tandem:spec_decode_num_draft_tokens_total", **lv) == 120
    assert _one(s, "tandem:spec_decode_num_accepted_tokens_total", **lv) == 72
    assert _one(s, "tandem:spec_decode_num_accepted_tokens_per_pos_total", position="0", **lv) == 24
    assert _one(s, "tandem:generation_tokens_total", **lv) == 102
    assert _one(s, "tandem:inter_token_latency_seconds_count", **lv) == 12
    assert _one(s, "tandem:inter_token_latency_seconds_bucket", le="+Inf", **lv) == 12
    assert "tandem:time_to_first_token_seconds_bucket" in s
    assert _one(s, "tandem:num_requests_running", **lv) == 8
    assert _one(s, "tandem:num_requests_waiting", **lv) == 2
    assert _one(s, "tandem:node_power_usage_watts", source="measured", sensor="nvml", **lv) == 300
    assert (
        _one(s, "tandem:node_power_usage_watts", node="sram-1", source="modeled", role="draft")
        == 100
    )
    assert (
        _one(
            s,
            "tandem:node_total_energy_consumption_joules_total",
            node="gpu-1",
            energy_role="verify",
        )
        == 900
    )
    assert _one(s, "tandem:fleet_power_watts", source="mixed") == 400
    assert _one(s, "tandem:pipeline_acceptance_rate", pipeline="chat") == pytest.approx(0.6)
    assert _one(s, "tandem:telemetry_samples_total") == 6
    assert _one(s, "tandem:aggregator_tick_work_seconds", stat="max") >= 0


def test_metrics_access(settings, live, viewer, outsider):
    from tests.conftest import client_for

    settings.METRICS_TOKEN = ""
    assert Client(REMOTE_ADDR="10.0.0.9").get("/metrics").status_code == 403
    viewer_key = client_for(viewer)._credentials["HTTP_AUTHORIZATION"]
    outsider_key = client_for(outsider)._credentials["HTTP_AUTHORIZATION"]
    remote = Client(REMOTE_ADDR="10.0.0.9")
    assert remote.get("/metrics", HTTP_AUTHORIZATION=viewer_key).status_code == 200
    assert remote.get("/metrics", HTTP_AUTHORIZATION=outsider_key).status_code == 403
    assert remote.get("/metrics", HTTP_AUTHORIZATION="Bearer tdm_nope_nope").status_code == 401
    settings.METRICS_TOKEN = "s3cret-scrape-token"
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 401
    assert remote.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    ok = remote.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-scrape-token")
    assert ok.status_code == 200 and b"tandem:spec_decode_num_drafts_total" in ok.content
    assert (
        remote.post("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-scrape-token").status_code == 405
    )


def test_wrong_keys_on_metrics_count_toward_the_lockout(settings, viewer):
    """/metrics takes API keys through the same lockout as the REST API: guessing keys
    there locks the address out (429 for wrong keys; the right key still works), and the
    count is shared with the REST API."""
    from fleet.accounts.services import api_key_create

    settings.METRICS_TOKEN = ""
    settings.API_KEY_FAILURE_LIMIT = 3
    _, good = api_key_create(user=viewer, name="scraper")
    remote = Client(REMOTE_ADDR="10.0.0.9")
    assert remote.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {good}").status_code == 200
    for i in range(settings.API_KEY_FAILURE_LIMIT):
        wrong = remote.get("/metrics", HTTP_AUTHORIZATION=f"Bearer tdm_{i:08x}_guess")
        assert wrong.status_code == 401
    locked = remote.get("/metrics", HTTP_AUTHORIZATION="Bearer tdm_0000ffff_guess")
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    rest = remote.get("/api/v1/generations", HTTP_AUTHORIZATION="Bearer tdm_0000ffff_guess")
    assert rest.status_code == 429
    assert remote.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {good}").status_code == 200


def test_metrics_with_no_aggregator(settings, db):
    settings.METRICS_TOKEN = ""
    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics")
    assert response.status_code == 200 and b"tandem:fleet_nodes" in response.content


def test_metrics_are_per_pipeline_by_default(settings, fleet_of_three):
    """Without ?per_node the node series are summed per pipeline, role and class: no `node`
    label anywhere, the `simulated` label kept, figures the sums of the nodes'."""
    settings.METRICS_TOKEN = ""
    settings.METRICS_PER_NODE = False
    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics")
    assert response.status_code == 200
    s = _samples(response.content.decode())
    assert not [x for xs in s.values() for x in xs if "node" in x.labels]
    chat = {"pipeline": "chat", "role": "verify", "simulated": "false"}
    assert _one(s, "tandem:spec_decode_num_drafts_total", **chat) == 60  # 2 nodes x 30
    assert _one(s, "tandem:spec_decode_num_accepted_tokens_total", **chat) == 144
    per_pos = "tandem:spec_decode_num_accepted_tokens_per_pos_total"
    assert _one(s, per_pos, position="0", **chat) == 48
    assert _one(s, "tandem:inter_token_latency_seconds_count", **chat) == 24
    assert _one(s, "tandem:inter_token_latency_seconds_bucket", le="+Inf", **chat) == 24
    assert _one(s, "tandem:num_requests_running", **chat) == 16
    assert _one(s, "tandem:node_power_usage_watts", source="measured", **chat) == 600
    assert _one(s, "tandem:node_utilization_ratio", **chat) == _one(
        s, "tandem:node_utilization_ratio", pipeline="sim", role="verify"
    )  # a mean, not a sum
    sim = {"pipeline": "sim", "role": "verify", "simulated": "true"}
    assert _one(s, "tandem:spec_decode_num_drafts_total", **sim) == 30
    assert _one(s, "tandem:pipeline_nodes", state="online", **chat) == 2
    assert _one(s, "tandem:pipeline_nodes", state="online", **sim) == 1
    assert "tandem:node_state" not in s


def test_per_node_series_by_setting_or_parameter(settings, fleet_of_three):
    settings.METRICS_TOKEN = ""
    scraper = Client(REMOTE_ADDR="127.0.0.1")

    def nodes_in(response) -> set[str]:
        assert response.status_code == 200
        text = response.content.decode()
        return {
            x.labels["node"]
            for xs in _samples(text).values()
            for x in xs
            if x.name == "tandem:spec_decode_num_drafts_total" and "node" in x.labels
        }

    everyone = {"gpu-1", "gpu-2", "sram-1", "sim-gpu-1"}
    settings.METRICS_PER_NODE = False
    assert nodes_in(scraper.get("/metrics")) == set()
    assert nodes_in(scraper.get("/metrics?per_node=1")) == everyone
    settings.METRICS_PER_NODE = True
    assert nodes_in(scraper.get("/metrics")) == everyone
    assert nodes_in(scraper.get("/metrics?per_node=false")) == set()
    bad = scraper.get("/metrics?per_node=maybe")
    assert bad.status_code == 400 and b"per_node" in bad.content
