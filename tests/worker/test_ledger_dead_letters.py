"""The ledger tells bad data from a bad day: a well-signed report that can never be stored
(non-finite numbers, an over-long field, a finish that does not fit its request, a constraint
the database refuses) is set aside in the dead-letter stream with its reason, counted in
/metrics and shown on the console, and the ledger goes on; a transient database error is
retried. Over the real Redis stream and the real (SQLite) database."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import IntegrityError, OperationalError

from fleet import redis_clients
from fleet.telemetry.metrics import render_metrics
from inference import dead_letters, ledger, node_reports, report_checks, report_services
from inference.models import Generation
from tests.worker.test_ledger import _drain, _finish, _gen, _pipeline, _xadd, own_stream

__all__ = ["own_stream"]  # the fixture, shared with test_ledger


def _xadd_raw(node_id: int, body: str, key: str) -> None:
    """A body as a node could sign it, bypassing `encode` (which writes what json.dumps
    writes: NaN and Infinity included)."""
    entry = {"node": str(node_id), "body": body, "sig": node_reports.sign(node_id, body, key)}
    redis_clients.client().xadd(node_reports.STREAM, entry)  # type: ignore[arg-type]


def _claimed(pipeline, node, key, **fields) -> Generation:
    gen = _gen(pipeline, node, **fields)
    _xadd(node.pk, {"kind": "claim", "starts": [[str(gen.pk), 1]]}, key)
    return gen


def _letters() -> list[dict]:
    entries: Any = redis_clients.client().xrange(dead_letters.stream())
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries]


def test_a_signed_finish_with_non_finite_numbers_no_longer_blocks_the_ledger(db, own_stream):
    """Before: the database's JSON check refused NaN; the ledger retried that entry forever
    and every later report (of every pipeline) waited behind it."""
    pipeline, (a, key_a), _ = _pipeline()
    nan, inf, huge, after = (_claimed(pipeline, a, key_a) for _ in range(4))
    body = json.dumps(_finish(nan, [1, 2], counters={"num_drafts": float("nan")}))
    assert "NaN" in body
    _xadd_raw(a.pk, body, key_a)
    _xadd_raw(a.pk, json.dumps(_finish(inf, [1], itl_ms={"p50": float("inf")})), key_a)
    text = json.dumps(_finish(huge, [1], itl_ms={"p50": 1.5})).replace("1.5", "1e999")
    _xadd_raw(a.pk, text, key_a)
    _xadd(a.pk, _finish(after, [5, 6, 7]), key_a)

    _drain(ledger.Ledger(client=redis_clients.client()))

    after.refresh_from_db()
    assert (after.state, after.output_tokens) == ("finished", [5, 6, 7])
    for gen in (nan, inf, huge):
        gen.refresh_from_db()
        assert gen.state == "failed" and "refused by the ledger" in gen.error, gen.error
        assert gen.counters == {} and gen.itl_ms == {}
    reasons = [d["reason"] for d in _letters()]
    assert len(reasons) == 3, reasons
    assert "non-finite number NaN" in reasons[0] and "Infinity" in reasons[1]
    assert "1e999" in reasons[2]
    assert all(d["node"] == str(a.pk) and d["sig"] for d in _letters())
    counts = ledger.stats()
    assert counts["dead_letters"] == 3 and counts["bad_data"] == 3, counts
    metrics = render_metrics({}).decode()
    assert "tandem:ledger_dead_letters_total 3.0" in metrics
    assert 'tandem:ledger_entries_total{outcome="bad_data"} 3.0' in metrics


def test_an_over_long_finish_reason_is_refused_as_postgresql_would(db, own_stream):
    pipeline, (a, key_a), _ = _pipeline()
    long, after = _claimed(pipeline, a, key_a), _claimed(pipeline, a, key_a)
    assert report_checks.FINISH_REASON_MAX == Generation._meta.get_field("finish_reason").max_length
    _xadd(a.pk, _finish(long, [1], finish_reason="x" * 21), key_a)
    _xadd(a.pk, _finish(after, [1], finish_reason="x" * 20), key_a)
    _drain(ledger.Ledger(client=redis_clients.client()))
    long.refresh_from_db()
    after.refresh_from_db()
    assert long.state == "failed" and "finish_reason is 21 characters" in long.error
    assert (after.state, after.finish_reason) == ("finished", "x" * 20)


def test_a_finish_must_fit_its_request(db, own_stream):
    """100,000 tokens for max_tokens 16, or counters no such sequence can have: refused, the
    generation fails saying why, and a finish that fits is stored."""
    pipeline, (a, key_a), _ = _pipeline()
    params = {"max_tokens": 16}
    many, drafts, accepted, fits = (_claimed(pipeline, a, key_a, params=params) for _ in range(4))
    _xadd(a.pk, _finish(many, list(range(100_000))), key_a)
    _xadd(a.pk, _finish(drafts, [1], counters={"num_drafts": 10**9}), key_a)
    _xadd(
        a.pk,
        _finish(accepted, [1], counters={"num_draft_tokens": 4, "num_accepted_tokens": 9}),
        key_a,
    )
    real = {"num_drafts": 5, "num_draft_tokens": 20, "num_accepted_tokens": 11}
    _xadd(a.pk, _finish(fits, list(range(16)), counters=real), key_a)
    _drain(ledger.Ledger(client=redis_clients.client()))
    rows = {g.pk: Generation.objects.get(pk=g.pk) for g in (many, drafts, accepted, fits)}
    assert "100000 output tokens for a request of max_tokens 16" in rows[many.pk].error
    assert rows[many.pk].output_tokens == []
    assert "num_drafts" in rows[drafts.pk].error
    assert "num_accepted_tokens exceeds" in rows[accepted.pk].error
    assert (rows[fits.pk].state, len(rows[fits.pk].output_tokens)) == ("finished", 16)
    assert len(_letters()) == 3


def test_a_constraint_is_set_aside_and_a_bad_day_is_retried(db, own_stream, monkeypatch):
    pipeline, (a, key_a), _ = _pipeline()
    broken, later = _claimed(pipeline, a, key_a), _claimed(pipeline, a, key_a)
    consumer = ledger.Ledger(client=redis_clients.client())
    _drain(consumer)  # the claims
    real = report_services.generation_finish
    failures = {"operational": 1}

    def finish(**kwargs):
        if kwargs["generation_id"] == str(broken.pk):  # this row, whenever it is tried
            raise IntegrityError("CHECK constraint failed: counters")
        if kwargs["generation_id"] == str(later.pk) and failures["operational"]:
            failures["operational"] -= 1
            raise OperationalError("database is locked")
        return real(**kwargs)

    monkeypatch.setattr(report_services, "generation_finish", finish)
    _xadd(a.pk, _finish(broken, [1]), key_a)
    _xadd(a.pk, _finish(later, [2]), key_a)
    consumer.backlog = False
    with pytest.raises(OperationalError):  # a bad day: the batch is not acknowledged
        consumer.step(block_ms=10)
    assert redis_clients.client().xpending(node_reports.STREAM, ledger.GROUP)["pending"] == 2
    consumer.backlog = True  # as `run` does after an error: its pending entries again
    _drain(consumer)
    broken.refresh_from_db()
    later.refresh_from_db()
    assert later.state == "finished"
    assert broken.state == "failed" and "IntegrityError" in broken.error
    letters = _letters()
    # set aside once, although its batch was applied twice (the first one rolled back)
    assert len(letters) == 1 and "CHECK constraint failed" in letters[0]["reason"]
    assert not redis_clients.client().xpending(node_reports.STREAM, ledger.GROUP)["pending"]


def test_a_replayed_batch_writes_no_dead_letter_twice(db, own_stream):
    pipeline, (a, key_a), _ = _pipeline()
    gen = _claimed(pipeline, a, key_a)
    _xadd(a.pk, _finish(gen, [1], finish_reason="y" * 30), key_a)
    consumer = ledger.Ledger(client=redis_clients.client())
    consumer.ensure_group()
    consumer.backlog = False
    read: Any = consumer.r.xreadgroup(
        ledger.GROUP, ledger.CONSUMER, {node_reports.STREAM: ">"}, count=10
    )
    entries = [e for _, es in read for e in es]
    consumer.apply(entries)
    consumer.apply(entries)  # crashed before XACK; read again
    assert len(_letters()) == 1


def test_strict_parsing_refuses_non_finite_numbers():
    for text in ('{"a": NaN}', '{"a": -Infinity}', '{"a": 1e999}', "[1, -1e400]"):
        with pytest.raises(node_reports.BadReport):
            node_reports.loads(text)
    assert node_reports.loads('{"a": 1e300, "b": [1, 2.5]}') == {"a": 1e300, "b": [1, 2.5]}


def test_the_console_shows_the_dead_letters(db, own_stream, client, viewer):
    pipeline, (a, key_a), _ = _pipeline()
    gen = _claimed(pipeline, a, key_a)
    _xadd(a.pk, _finish(gen, [1], finish_reason="z" * 25), key_a)
    _drain(ledger.Ledger(client=redis_clients.client()))
    client.force_login(viewer)
    page = client.get("/").content.decode()
    assert 'id="ledger-dead-letters"' in page
    assert "finish_reason is 25 characters" in page
