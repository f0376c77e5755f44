"""SIGKILL of a pipeline's only drafter under 4 streams (real worker processes): its verifier
finishes them by plain decoding (k=0) -- same attempt, nothing re-prefilled, nothing failed
-- with the text plain greedy decoding gives, and says so (inspect, telemetry); a request
that comes while no drafter is healthy goes to the verifier alone."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from fleet.telemetry.ingest import client, unpack
from fleet.telemetry.ingest import stream_of as telemetry_stream_of
from inference import services
from inference.engine.checkpoints import load_checkpoint
from inference.engine.engines import VerifyEngine
from inference.engine.generator import generate
from inference.engine.sampling import SamplingParams
from inference.models import Generation
from inference.selectors import node_inspect, stream_of
from inference.text.tokenizer import Tokenizer
from tests.worker.helpers import (
    Workers,
    make_pipeline,
    tokens_of,
    wait_done,
    wait_online,
    write_pair,
)
from tests.worker.test_workers import prompts, submit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

N_TOKENS = 96


def plain(target, ps: list[list[int]]) -> list[list[int]]:
    """Greedy plain decoding by the target alone, in this process."""
    model, tok = load_checkpoint(target)
    params = SamplingParams(temperature=0.0, max_tokens=N_TOKENS, ignore_eos=True)
    return [o.token_ids for o in generate(VerifyEngine(model, tok, n_slots=len(ps)), ps, params)]


def degraded_in_telemetry(node_id: int) -> int:
    """The verifier's `degraded_sequences`, summed over its signed samples so far."""
    entries: list = client().xrange(telemetry_stream_of(node_id))  # type: ignore[assignment]
    bodies = [json.loads(unpack(fields)["body"]) for _, fields in entries]
    return sum(b.get("degraded_sequences", 0) for b in bodies if b.get("role") == "verify")


def wait_for(condition, timeout: float, what: str, workers: Workers):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what}\n{workers.logs()}"
        time.sleep(0.1)
    return value


def test_a_killed_drafters_streams_finish_on_their_verifier_by_plain_decoding(
    live_server, tmp_path, settings
):
    settings.HEARTBEAT_PERIOD_S = 1
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline(
        "deg", target, draft, max_batch_wait_ms=10, k_policy={"mode": "fixed", "k": 4}
    )
    (drafter, _, _), (verifier, _, _) = nodes
    ps = prompts(5, seed=11)
    expected = plain(target, ps)
    text = Tokenizer.from_dir(target).decode
    with Workers(tmp_path, api_url=live_server.url) as workers:
        for node, role, token in nodes:
            workers.start(node, role, token)
        wait_online(nodes, workers)
        gens = [submit(pipeline, p, N_TOKENS, ignore_eos=True) for p in ps[:4]]
        assert {g.drafter_id for g in gens} == {drafter.pk}

        def streamed() -> list[list[int]]:
            return [tokens_of(e for _, e in stream_of(g.pk)) for g in gens]

        wait_for(lambda: min(map(len, streamed())) >= 2, 60, "4 streams flowing", workers)
        # Stopped first, so that every stream is surely mid-way when it dies.
        os.killpg(workers.procs[drafter.pk].pid, signal.SIGSTOP)
        assert max(map(len, streamed())) < N_TOKENS
        workers.kill(drafter)
        # What `manage.py up`'s supervisor does when it sees its child exit.
        report = services.node_process_gone(node_ref=str(drafter.pk), reason="its worker died")
        assert sorted(report["degraded"]) == sorted(str(g.pk) for g in gens), report
        assert report["rerouted"] == report["failed"] == []

        ended = wait_done([g.pk for g in gens], timeout=120, workers=workers)
        for g, want in zip(gens, expected[:4], strict=True):
            events = ended[str(g.pk)]
            assert events[-1]["type"] == "done", events[-1]
            assert not [e for e in events if e["type"] in ("requeued", "error")], events
            assert tokens_of(events) == want  # nothing resent, nothing lost
            assert "".join(e.get("text", "") for e in events) == text(want)

        # A request while no drafter is healthy: the verifier alone, the same text.
        late = submit(pipeline, ps[4], N_TOKENS, ignore_eos=True)
        assert (late.drafter_id, late.verifier_id) == (None, verifier.pk)
        events = wait_done([late.pk], timeout=120, workers=workers)[str(late.pk)]
        assert events[-1]["type"] == "done" and tokens_of(events) == expected[4]

        rows = Generation.objects.filter(pk__in=[g.pk for g in [*gens, late]])
        wait_for(lambda: rows.filter(state="finished").count() == 5, 30, "rows", workers)
        for g, want in zip([*gens, late], expected, strict=True):
            row = rows.get(pk=g.pk)
            assert (row.output_tokens, row.drafter_id, row.attempts) == (want, None, 1)
        # It says so: in its inspection and in its signed telemetry.

        def inspected_stats() -> dict:
            return (node_inspect(verifier.pk) or {}).get("stats", {})

        wait_for(lambda: inspected_stats().get("degraded") == 5, 10, "inspect: 5 degraded", workers)
        stats = inspected_stats()
        assert stats["errors"] == 0, stats
        wait_for(
            lambda: degraded_in_telemetry(verifier.pk) == 5, 15, "telemetry: 5 degraded", workers
        )
