"""kill -9 of a verifier and a drafter mid-generation: the verifier's generations move to
healthy nodes, those that lost only their drafter finish on their verifier by plain decoding;
all with output identical to an undisturbed run (greedy); nothing hangs."""

from __future__ import annotations

import time
import uuid

import pytest

from inference import ledger, services, wire
from inference.models import Generation
from inference.selectors import stream_of
from tests.worker.helpers import (
    Workers,
    ledger_settled,
    make_pipeline,
    tokens_of,
    wait_online,
    write_pair,
)
from tests.worker.test_workers import inprocess, prompts, submit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_killed_verifier_and_drafter_reroute_with_identical_output(live_server, tmp_path, settings):
    settings.HEARTBEAT_PERIOD_S, settings.HEARTBEAT_TOLERANCE = 1, 4
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline(
        "ha", target, draft, drafters=2, verifiers=2, max_batch_wait_ms=10
    )
    by_name = {n.name: n for n, _, _ in nodes}
    ps = prompts(8, seed=3)
    n_tokens = 120
    expected = inprocess(target, draft, ps, max_tokens=n_tokens, ignore_eos=True)
    with Workers(tmp_path, api_url=live_server.url) as workers:
        for node, role, token in nodes:
            workers.start(node, role, token)
        wait_online(nodes, workers)
        refused_before = ledger.stats().get("refused", 0)
        gens = [submit(pipeline, p, n_tokens, ignore_eos=True) for p in ps]
        deadline = time.monotonic() + 60
        while min(len(tokens_of(e for _, e in stream_of(g.pk))) for g in gens) < 4:
            assert time.monotonic() < deadline, workers.logs()
            time.sleep(0.05)
        victims = [by_name["ha-verify-0"], by_name["ha-draft-1"]]
        for v in victims:
            workers.kill(v)
        hit = [
            g.pk for g in gens if g.verifier_id == victims[0].pk or g.drafter_id == victims[1].pk
        ]
        assert hit, "the router spread the work: some generations ran on the victims"
        moved = {g.pk for g in gens if g.verifier_id == victims[0].pk}
        # The control worker's watchdog, run here: marks them lost, re-routes their work.
        deadline = time.monotonic() + 120
        ended: dict[uuid.UUID, list[dict]] = {}
        while len(ended) < len(gens):
            assert time.monotonic() < deadline, f"hang: {len(ended)}/{len(gens)}\n{workers.logs()}"
            services.generations_watchdog()
            for g in gens:
                events = [e for _, e in stream_of(g.pk)]
                if events and events[-1]["type"] in wire.TERMINAL_TYPES:
                    ended[g.pk] = events
            time.sleep(0.3)
        for g, want in zip(gens, expected, strict=True):
            events = ended[g.pk]
            assert events[-1]["type"] == "done", events[-1]
            assert tokens_of(events) == want  # resumed: nothing resent, nothing lost
            assert "".join(e.get("text", "") for e in events) == _decode(target, want)
            if g.pk in moved:
                assert any(e["type"] == "requeued" for e in events)
        rows = Generation.objects.filter(pk__in=hit)
        deadline = time.monotonic() + 20
        while rows.filter(state="finished").count() < len(hit):
            assert time.monotonic() < deadline, list(rows.values("state", "error"))
            time.sleep(0.2)
        for row in rows:
            if row.pk in moved:
                assert row.attempts >= 2
            else:  # only its drafter died: its verifier finished it alone, same attempt
                assert (row.attempts, row.drafter_id) == (1, None)
            assert row.verifier_id != victims[0].pk and row.drafter_id != victims[1].pk
        # What the killed verifier had reported (claims, first tokens) was applied once and
        # never finished a row: every row holds the healthy verifier's whole output, once.
        ledger_settled()
        for g, want in zip(gens, expected, strict=True):
            row = Generation.objects.get(pk=g.pk)
            assert (row.state, row.output_tokens) == ("finished", want)
            assert row.started_at and row.first_token_at
        counts = ledger.stats()
        assert counts.get("refused", 0) == refused_before, counts


def _decode(target, ids):
    from inference.text.tokenizer import Tokenizer

    return Tokenizer.from_dir(target).decode(ids)
