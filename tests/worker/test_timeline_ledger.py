"""A generation's timeline from what the ledger stores: the verifier's round log rides on the
finish and is checked like the rest of it (a bad log is set aside, never stored);
`inference.timeline` puts it in order with the control plane's notes (re-routes and
degrades: tests/worker/test_process_gone.py), and `inference.otel_spans` turns it into
spans. Over the real Redis stream and database."""

from __future__ import annotations

import time
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fleet import redis_clients
from inference import dead_letters, ledger, otel_spans
from inference.models import Generation
from inference.report_checks import ROUND_FIELDS, BadReport, check_shape
from inference.timeline import timeline
from tests.worker.test_ledger import _drain, _finish, _gen, _pipeline, _xadd, own_stream

__all__ = ["own_stream"]


def _log(t0: float, rows: list[list[float]], **extra) -> dict:
    return {"t0": t0, "prefill_ms": 12.5, "fields": list(ROUND_FIELDS), "rounds": rows, **extra}


def _claim_and_finish(pipeline, node, key, tokens, rows, **fields) -> Generation:
    """A generation claimed, its first token and its finish, the finish carrying `rows` (its
    verifier's round log, begun now: None for a worker that sends no log)."""
    gen = _gen(pipeline, node, params={"max_tokens": 16}, **fields)
    log = None if rows is None else _log(time.time(), rows)
    _xadd(node.pk, {"kind": "claim", "starts": [[str(gen.pk), 1]]}, key)
    _xadd(node.pk, {"kind": "first_token", "ids": [str(gen.pk)], "at": time.time()}, key)
    counters = {"num_drafts": 2, "num_draft_tokens": 8, "num_accepted_tokens": 5}
    _xadd(node.pk, _finish(gen, tokens, counters=counters, rounds=log), key)
    return gen


def test_a_finish_carries_its_rounds_into_the_timeline_in_order(db, own_stream):
    pipeline, (a, key_a), _ = _pipeline()
    rows = [[20.0, 4, 4, 3, 6.5], [31.0, 4, 1, 5, 7.0], [40.0, 0, 0, 5, 4.0]]
    gen = _claim_and_finish(pipeline, a, key_a, [5, 6, 7, 8, 9, 10, 11, 12], rows)
    _drain(ledger.Ledger(client=redis_clients.client()))

    gen.refresh_from_db()
    assert gen.state == "finished"
    t = timeline(gen)
    assert [r["k"] for r in t["rounds"]] == [4, 4, 0]
    assert [r["accepted"] for r in t["rounds"]] == [4, 1, 0]
    base = (gen.rounds["t0"] - gen.created_at.timestamp()) * 1000
    want = [base + 20, base + 31, base + 40]
    assert [r["at_ms"] for r in t["rounds"]] == pytest.approx(want, abs=0.01)
    s = t["summary"]
    assert (s["rounds"], s["draft_rounds"], s["drafted"], s["accepted"]) == (3, 2, 8, 5)
    assert s["drafted"] == gen.counters["num_draft_tokens"]
    assert s["accepted"] == gen.counters["num_accepted_tokens"]
    assert s["mean_batch"] == pytest.approx(13 / 3)
    kinds = [e["kind"] for e in t["events"]]
    assert kinds[0] == "queued" and kinds[-1] == "finished"
    assert {"claimed", "prefill", "first_token"} <= set(kinds)
    times = [e["at_ms"] for e in t["events"]]
    assert times == sorted(times)
    prefill = next(e for e in t["events"] if e["kind"] == "prefill")
    assert prefill["duration_ms"] == 12.5


@pytest.mark.parametrize(
    "log, why",
    [
        ({"t0": 1.0, "rounds": [[1, 2, 3, 1, 1]]}, "accepted 3 of k 2"),
        ({"t0": 1.0, "rounds": [[1, 2, 1, 1]]}, "must be [at_ms"),
        ({"t0": 1.0, "rounds": [[1, 2, 1, 1, float("nan")]]}, "finite"),
        ({"t0": 1.0, "rounds": "many"}, "a list of at most"),
        ({"rounds": []}, "rounds.t0 must be a number"),
        ({"t0": 1.0, "rounds": [], "fields": ["k"]}, "rounds.fields"),
        ([1, 2], "rounds must be an object"),
    ],
)
def test_a_malformed_round_log_is_refused(log, why):
    report = {
        "kind": "finish",
        "gen": "7c0b5b9e-6f1b-4d6f-9b7a-2a6d3c1e9f00",
        "attempt": 1,
        "output_tokens": [],
        "rounds": log,
    }
    with pytest.raises(BadReport, match=why.replace("[", r"\[")):
        check_shape(report)


def test_a_bad_round_log_is_set_aside_and_the_ledger_goes_on(db, own_stream):
    pipeline, (a, key_a), _ = _pipeline()
    too_many = [[float(i), 1, 1, 1, 1.0] for i in range(40)]  # max_tokens 16: at most 17
    bad = _claim_and_finish(pipeline, a, key_a, [1, 2], too_many)
    good = _claim_and_finish(pipeline, a, key_a, [3, 4], [[5.0, 2, 1, 1, 1.0]])
    _drain(ledger.Ledger(client=redis_clients.client()))

    bad.refresh_from_db()
    good.refresh_from_db()
    assert bad.state == "failed" and "40 rounds logged" in bad.error
    assert bad.rounds == {}
    assert good.state == "finished" and len(good.rounds["rounds"]) == 1
    letters: Any = redis_clients.client().xrange(dead_letters.stream())
    assert any(b"40 rounds logged" in fields[b"reason"] for _, fields in letters)


def test_a_finish_from_a_worker_without_a_round_log_still_applies(db, own_stream):
    pipeline, (a, key_a), _ = _pipeline()
    gen = _claim_and_finish(pipeline, a, key_a, [1, 2], None)
    _drain(ledger.Ledger(client=redis_clients.client()))
    gen.refresh_from_db()
    assert gen.state == "finished"
    assert timeline(gen)["rounds"] == []


def test_the_timeline_becomes_one_trace_named_by_the_generation(db, own_stream):
    pipeline, (a, key_a), _ = _pipeline()
    rows = [[20.0, 4, 4, 3, 6.5], [31.0, 4, 1, 5, 7.0]]
    gen = _claim_and_finish(pipeline, a, key_a, [5, 6, 7, 8, 9, 10, 11], rows)
    _drain(ledger.Ledger(client=redis_clients.client()))
    gen.refresh_from_db()

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel_spans.record(gen, provider.get_tracer("test"))

    spans: dict[str, Any] = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"generation", "queue", "prefill", "decode"}
    assert {s.context.trace_id for s in spans.values()} == {gen.pk.int}
    root = spans["generation"]
    for name in ("queue", "prefill", "decode"):
        assert spans[name].parent.span_id == root.context.span_id
        assert root.start_time <= spans[name].start_time <= spans[name].end_time <= root.end_time
    assert root.attributes["tandem.spec.accepted_tokens"] == 5
    rounds = [e for e in spans["decode"].events if e.name == "verify_round"]
    assert [(e.attributes["k"], e.attributes["accepted"]) for e in rounds] == [(4, 4), (4, 1)]


def test_the_ledger_exports_a_finish_only_when_an_endpoint_is_set(db, own_stream, monkeypatch):
    exported: list[str] = []
    monkeypatch.setattr(otel_spans, "export", exported.append)
    pipeline, (a, key_a), _ = _pipeline()
    for var in otel_spans.ENDPOINT_VARS:
        monkeypatch.delenv(var, raising=False)
    off = _claim_and_finish(pipeline, a, key_a, [1], [])
    _drain(ledger.Ledger(client=redis_clients.client()))
    assert exported == [] and Generation.objects.get(pk=off.pk).state == "finished"

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    with pytest.MonkeyPatch.context():
        on = _claim_and_finish(pipeline, a, key_a, [1], [])
        from django.test import TestCase

        with TestCase.captureOnCommitCallbacks(execute=True):
            _drain(ledger.Ledger(client=redis_clients.client()))
    assert exported == [str(on.pk)]
