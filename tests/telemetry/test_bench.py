"""bench_telemetry end to end, small: real stream, aggregator and daphne subprocesses."""

import json

import pytest
from django.core.management import call_command

from fleet.nodes.models import Node

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_bench_telemetry_small(tmp_path, settings, monkeypatch):
    out = tmp_path / "bench.json"
    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("sqlite3"):
        pytest.skip("the bench's subprocesses read the test DB through DATABASE_URL (SQLite here)")
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{db['NAME']}")  # for its subprocesses
    call_command("bench_telemetry", nodes=50, seconds=6, json_path=str(out))
    report = json.loads(out.read_text())
    assert report["nodes"] == 50
    assert report["lag_p99_s"] is not None and report["lag_p99_s"] <= 2.0
    assert 1.0 <= report["messages_per_s_to_browser"] <= 4.0
    assert report["aggregator_dropped"] == {}
    assert not Node.objects.filter(name__startswith="bench-").exists()  # cleaned up
