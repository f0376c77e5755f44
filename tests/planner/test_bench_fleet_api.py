"""`manage.py bench_fleet_api` runs end to end at a smaller fleet and reports every figure."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from fleet.telemetry.ingest import client
from fleet.telemetry.snapshot import LIVE_KEY

TIMED = {"n", "p50_ms", "p99_ms", "max_ms"}


@pytest.mark.slow
@pytest.mark.timeout(300)  # a whole benchmark run
@pytest.mark.django_db
def test_bench_fleet_api_reports_every_figure(tmp_path):
    out = tmp_path / "fleet_api.json"
    try:
        call_command(
            "bench_fleet_api",
            nodes=2000,
            pipelines=4,
            rounds=2,
            actions=3,
            json_path=str(out),
            use_current_db=True,
        )
    finally:
        client().delete(LIVE_KEY)
    result = json.loads(out.read_text())
    assert result["nodes"] == 2000 and result["pipelines"] == 4
    assert result["database"] in {"sqlite", "postgresql"}
    cases = result["node_list"]["cases"]
    assert {"by_name", "state_online", "kind_sram_by_state", "search_limit_200"} <= set(cases)
    for case in cases.values():
        assert TIMED <= set(case) and case["n"] >= 2 and case["rows_seen"] > 0
        assert len(case["queries_per_page"]) == 1  # the same count on every page
    walk = cases["walk_all_by_state_limit_200"]
    assert walk["rows_seen"] == walk["distinct_rows_seen"] == 2000  # every node, once
    for key in ("move", "drain", "return", "what_if", "k_policy"):
        assert TIMED <= set(result[key]), key
    assert result["move"]["n"] == 3 and result["move"]["bytes_max"] < 2000
    for key in ("metrics", "metrics_per_node", "fleet_page", "pipeline_detail"):
        assert TIMED | {"bytes"} <= set(result[key]), key
    for key in ("pipeline_placements", "pipeline_page"):
        assert TIMED | {"bytes"} <= set(result[key]), key
    # 500 placements per pipeline: a configuration change answers 100 of them, not all
    assert result["k_policy"]["bytes_max"] < 30_000
    assert result["metrics_per_node"]["bytes"] > 10 * result["metrics"]["bytes"]


def test_bench_fleet_api_refuses_a_fleet_too_small_to_move_in():
    with pytest.raises(CommandError):
        call_command("bench_fleet_api", nodes=10, pipelines=1, use_current_db=True)
