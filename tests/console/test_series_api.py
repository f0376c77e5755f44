"""The live charts' history API: time ranges from the rollups, request and error rates from
the generation records, configuration changes from the audit log, the pipeline's SLOs."""

from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.pipelines.services import pipeline_set_k_policy, pipeline_update
from fleet.telemetry.models import Rollup
from inference.models import Generation, GenerationState
from tests.telemetry import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def pipeline():
    return f.pipeline(name="chat")


@pytest.mark.parametrize(
    ("persona", "status"), [("anonymous", 401), ("outsider", 403), ("viewer", 200)]
)
def test_viewers_only(as_persona, pipeline, persona, status):
    response = as_persona(persona).get(f"/api/v1/series/pipeline/{pipeline.pk}?range=5m")
    assert response.status_code == status


def test_bad_input_is_400_or_404(as_persona, pipeline):
    api = as_persona("viewer")
    bad = api.get(f"/api/v1/series/pipeline/{pipeline.pk}?range=2d")
    assert bad.status_code == 400 and "range" in bad.json()
    bad = api.get(f"/api/v1/series/pipeline/{pipeline.pk}?parts=series,secrets")
    assert bad.status_code == 400 and "parts" in bad.json()
    assert api.get("/api/v1/series/pipeline/999999").status_code == 404
    assert api.get("/api/v1/series/galaxy/1").status_code == 404


def test_the_range_picks_rollups_and_resolution(as_persona, pipeline):
    now = timezone.now()
    for minutes_ago, resolution in ((3, 10), (50, 10), (300, 300), (1000, 300)):
        Rollup.objects.create(
            scope="pipeline",
            scope_id=pipeline.pk,
            resolution_s=resolution,
            start=now - timedelta(minutes=minutes_ago),
            data={"tokens_per_s": float(minutes_ago), "running": 3.0, "kv_usage": 0.5},
        )
    api = as_persona("viewer")

    def tokens(range_key):
        body = api.get(f"/api/v1/series/pipeline/{pipeline.pk}?range={range_key}").json()
        return body["series"]["tokens_per_s"]

    assert tokens("5m") == [3.0]
    assert tokens("1h") == [50.0, 3.0]
    assert tokens("24h") == [1000.0, 300.0]  # 5 min buckets beyond 6 h
    series = api.get(f"/api/v1/series/pipeline/{pipeline.pk}?range=5m").json()["series"]
    assert series["running"] == [3.0] and series["kv_usage"] == [0.5]


def test_change_markers_and_slos(as_persona, pipeline, operator):
    pipeline_set_k_policy(
        pipeline_id=pipeline.pk, actor=operator, k_policy={"mode": "fixed", "k": 2}
    )
    pipeline_update(
        pipeline_id=pipeline.pk,
        actor=operator,
        changes={"slo_itl_p99_ms": 80.0, "slo_ttft_p99_ms": 900.0},
    )
    other = f.pipeline(name="other")
    pipeline_set_k_policy(pipeline_id=other.pk, actor=operator, k_policy={"mode": "fixed", "k": 3})
    body = as_persona("viewer").get(f"/api/v1/series/pipeline/{pipeline.pk}?range=5m").json()
    texts = [m["text"] for m in body["markers"]]
    assert texts[0].startswith("k ") and texts[0].endswith("→ 2"), texts
    assert all(m["actor"] == operator.username for m in body["markers"])
    assert not any("→ 3" in t for t in texts)  # another pipeline's change is not drawn here
    assert body["slo"] == {"itl_p99_ms": 80.0, "ttft_p99_ms": 900.0}
    only = as_persona("viewer").get(f"/api/v1/series/pipeline/{pipeline.pk}?range=5m&parts=markers")
    assert set(only.json()) == {"range", "since", "markers"}


def test_request_and_error_rates_from_generation_records(as_persona, pipeline):
    now = timezone.now()
    finished = now - timedelta(seconds=95)  # a whole 10 s bucket, well inside the 5 min range
    for state in [GenerationState.FINISHED] * 3 + [GenerationState.FAILED]:
        Generation.objects.create(pipeline=pipeline, state=state, finished_at=finished)
    body = as_persona("viewer").get(f"/api/v1/series/pipeline/{pipeline.pk}?range=5m").json()
    rates = body["rates"]
    busy = [i for i, v in enumerate(rates["requests_per_s"]) if v]
    assert len(busy) == 1
    assert rates["requests_per_s"][busy[0]] == pytest.approx(0.4)  # 4 requests in 10 s
    assert rates["error_rate"][busy[0]] == pytest.approx(0.25)
    assert rates["error_rate"][busy[0] - 1] is None  # no request: no error rate, not 0


@pytest.mark.parametrize("scope", ["pipeline", "node", "fleet"])
def test_query_count_does_not_grow_with_history(as_persona, pipeline, operator, scope):
    node, _ = f.node(name="gpu-1")
    f.place(node, pipeline, "verify")
    api = as_persona("viewer")
    target = {"pipeline": pipeline.pk, "node": node.pk, "fleet": 0}[scope]
    url = f"/api/v1/series/{scope}/{target}?range=1h"

    def count() -> int:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as ctx:
            assert api.get(url).status_code == 200
        return len(ctx.captured_queries)

    count()  # the API key's first use is written down once
    few = count()
    finished = timezone.now() - timedelta(minutes=5)
    for k in (2, 3, 4, 5, 6, 7):
        pipeline_set_k_policy(
            pipeline_id=pipeline.pk, actor=operator, k_policy={"mode": "fixed", "k": k}
        )
    for _ in range(40):
        Generation.objects.create(
            pipeline=pipeline, verifier=node, state=GenerationState.FINISHED, finished_at=finished
        )
    assert count() == few
