"""The ledger: node workers' signed reports applied to the database once, in order, only for
the node that signed them -- over the real Redis stream and the real database, with the
consumer's own process killed mid-stream."""

from __future__ import annotations

import signal
import time
import uuid

import pytest
import redis as redis_lib
from django.conf import settings
from django.utils import timezone

from fleet import redis_clients
from fleet.nodes.signing import token_key
from inference import ledger, node_reports, wire
from inference.models import Generation
from tests.worker.helpers import Workers, ledger_settled, make_pipeline


@pytest.fixture
def own_stream(monkeypatch):
    """A stream and counters of this test's own (the suite shares one Redis)."""
    tag = uuid.uuid4().hex[:8]
    monkeypatch.setattr(node_reports, "STREAM", f"tandem:ledger:test:{tag}")
    monkeypatch.setattr(ledger, "STATS_KEY", f"tandem:ledger:stats:test:{tag}")
    sent: list[tuple[int, str, dict]] = []
    monkeypatch.setattr(wire, "send", lambda node, kind, p: sent.append((node, kind, p)))
    return sent


def _pipeline():
    pipeline, nodes = make_pipeline("ledger", "t", "", kind="none", verifiers=2)
    (a, _, token_a), (b, _, token_b) = nodes
    return pipeline, (a, token_key(a.pk, token_a)), (b, token_key(b.pk, token_b))


def _gen(pipeline, verifier, **fields) -> Generation:
    return Generation.objects.create(
        pipeline=pipeline, prompt_tokens=[1, 2], verifier=verifier, attempts=1, **fields
    )


def _xadd(node_id: int, report: dict, key: str) -> None:
    entry = node_reports.encode(node_id, report, key=key)
    redis_clients.client().xadd(node_reports.STREAM, entry)


def _finish(gen, tokens, **extra) -> dict:
    return {
        "kind": "finish",
        "gen": str(gen.pk),
        "attempt": 1,
        "finish_reason": "length",
        "output_tokens": tokens,
        "output_text": "x" * len(tokens),
        "counters": {"num_drafts": len(tokens), "num_accepted_tokens": 2 * len(tokens)},
        "itl_ms": {"n": len(tokens)},
        **extra,
    }


def _drain(consumer: ledger.Ledger) -> None:
    consumer.ensure_group()
    while True:
        backlog = consumer.backlog
        if not consumer.step(block_ms=10) and not backlog:
            return


def test_reports_apply_in_order_and_a_node_cannot_act_as_another(db, own_stream):
    pipeline, (a, key_a), (b, key_b) = _pipeline()
    mine, theirs = _gen(pipeline, a), _gen(pipeline, b)
    start = time.time()
    _xadd(a.pk, {"kind": "claim", "starts": [[str(mine.pk), 1]]}, key_a)
    _xadd(a.pk, {"kind": "first_token", "ids": [str(mine.pk)], "at": start}, key_a)
    _xadd(a.pk, _finish(mine, [5, 6, 7]), key_a)
    # node A forges node B's reports: signed with A's key but naming B ...
    _xadd(b.pk, {"kind": "claim", "starts": [[str(theirs.pk), 1]]}, key_a)
    entry = node_reports.encode(a.pk, _finish(theirs, [9]), key=key_a)
    entry["node"] = str(b.pk)  # ... or A's own signed entry re-labelled as B's
    redis_clients.client().xadd(node_reports.STREAM, entry)
    # ... or, as itself, claims and finishes B's generation
    _xadd(a.pk, {"kind": "claim", "starts": [[str(theirs.pk), 1]]}, key_a)
    _xadd(a.pk, _finish(theirs, [9]), key_a)
    garbage: dict = {"node": "x", "body": "{}", "sig": ""}
    redis_clients.client().xadd(node_reports.STREAM, garbage)

    _drain(ledger.Ledger(client=redis_clients.client()))

    mine.refresh_from_db()
    assert (mine.state, mine.output_tokens, mine.output_text) == ("finished", [5, 6, 7], "xxx")
    assert mine.started_at and mine.first_token_at
    assert abs(mine.first_token_at.timestamp() - start) < 1e-3
    assert mine.counters == {"num_drafts": 3, "num_accepted_tokens": 6}
    theirs.refresh_from_db()
    assert (theirs.state, theirs.output_tokens, theirs.started_at) == ("queued", [], None)
    # only A's own claim is granted; the one for B's generation is refused
    assert own_stream == [
        (a.pk, "claimed", {"starts": [[str(mine.pk), 1]], "refused": [[str(theirs.pk), 1]]})
    ]
    counts = ledger.stats()
    assert counts["refused"] == 2 and counts["malformed"] == 1, counts
    # B's own, well-signed claim still works
    _xadd(b.pk, {"kind": "claim", "starts": [[str(theirs.pk), 1]]}, key_b)
    _drain(ledger.Ledger(client=redis_clients.client()))
    theirs.refresh_from_db()
    assert theirs.state == "running"


def test_a_crash_between_commit_and_ack_applies_nothing_twice(db, own_stream):
    """The consumer dies after its transaction committed, before it acknowledged: the next
    one re-reads those entries (its pending ones first) and they change nothing."""
    pipeline, (a, key_a), _ = _pipeline()
    gens = [_gen(pipeline, a) for _ in range(3)]
    _xadd(a.pk, {"kind": "claim", "starts": [[str(g.pk), 1] for g in gens]}, key_a)
    for i, g in enumerate(gens):
        _xadd(a.pk, _finish(g, list(range(i + 1))), key_a)
    crashing = ledger.Ledger(client=redis_lib.Redis.from_url(settings.REDIS_URL))
    crashing.ensure_group()
    crashing.backlog = False

    def crash(*args):
        raise ConnectionError("killed before XACK")

    crashing.r.xack = crash  # type: ignore[method-assign]  # its own client: the restarted consumer's is untouched
    with pytest.raises(ConnectionError):
        crashing.step(block_ms=10)
    before = {g.pk: Generation.objects.get(pk=g.pk) for g in gens}
    assert all(r.state == "finished" and r.finished_at for r in before.values())
    own_stream.clear()

    restarted = ledger.Ledger(client=redis_clients.client())
    restarted.ensure_group()
    assert restarted.step() == 4  # its predecessor's pending entries, again
    for g in gens:
        after = Generation.objects.get(pk=g.pk)
        assert (after.finished_at, after.output_tokens, after.counters) == (
            before[g.pk].finished_at,
            before[g.pk].output_tokens,
            before[g.pk].counters,
        )
    # finished since: a replayed claim is refused (the verifier holds nothing for it)
    assert own_stream == [
        (a.pk, "claimed", {"starts": [], "refused": [[str(g.pk), 1] for g in gens]})
    ]
    assert restarted.step(block_ms=10) == 0  # acknowledged now
    assert not redis_clients.client().xpending(node_reports.STREAM, ledger.GROUP)["pending"]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_consumer_killed_mid_stream_loses_and_doubles_nothing(transactional_db, tmp_path):
    """`manage.py run_ledger` gets SIGKILL while reports stream in, and is started again:
    every claim, first token and finish is applied, each exactly as sent."""
    pipeline, (a, key_a), _ = _pipeline()
    n = 240
    gens = [_gen(pipeline, a) for _ in range(n)]
    at = time.time()
    workers = Workers(tmp_path, api_url="http://unused")
    try:
        for i, g in enumerate(gens):
            _xadd(a.pk, {"kind": "claim", "starts": [[str(g.pk), 1]]}, key_a)
            _xadd(a.pk, {"kind": "first_token", "ids": [str(g.pk)], "at": at + i}, key_a)
            _xadd(a.pk, _finish(g, list(range(i % 17 + 1))), key_a)
            if i == n // 3:  # mid-stream: once some are applied, kill -9
                deadline = time.monotonic() + 60
                while not Generation.objects.filter(state="finished").exists():
                    assert time.monotonic() < deadline, workers.logs()
                    time.sleep(0.01)
                workers.stop_ledger(signal.SIGKILL)
                applied_before_restart = Generation.objects.filter(state="finished").count()
            if i == 2 * n // 3:
                workers.start_ledger()
            time.sleep(0.002)
        ledger_settled(timeout=60)
    finally:
        workers.stop_ledger()
    assert 0 < applied_before_restart < n
    rows = {str(r.pk): r for r in Generation.objects.all()}
    for i, g in enumerate(gens):
        r = rows[str(g.pk)]
        tokens = list(range(i % 17 + 1))
        assert (r.state, r.output_tokens) == ("finished", tokens)
        assert r.counters == {"num_drafts": len(tokens), "num_accepted_tokens": 2 * len(tokens)}
        assert r.first_token_at and abs(r.first_token_at.timestamp() - (at + i)) < 1e-3
        assert r.started_at is not None and r.started_at <= timezone.now()
    total = sum(r.counters["num_accepted_tokens"] for r in rows.values())
    assert total == sum(2 * (i % 17 + 1) for i in range(n))
