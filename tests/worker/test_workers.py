"""Real worker processes over real Redis: greedy output equals the in-process engine,
verifier batches, cancel frees KV slots on both nodes."""

from __future__ import annotations

import random
import time

import pytest

from fleet.pipelines.models import Pipeline
from inference import services
from inference.engine.checkpoints import load_checkpoint
from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator
from inference.engine.sampling import SamplingParams
from inference.models import Generation
from inference.selectors import node_inspect, stream_of
from tests.worker.helpers import (
    Workers,
    make_pipeline,
    tokens_of,
    wait_done,
    wait_online,
    write_pair,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[256] + [rng.randrange(32, 127) for _ in range(rng.randrange(4, 16))] for _ in range(n)]


def inprocess(target, draft, ps, max_tokens: int, k: int = 4, **params) -> list[list[int]]:
    tm, tok = load_checkpoint(target)
    dm, _ = load_checkpoint(draft)
    gen = SpeculativeGenerator(
        VerifyEngine(tm, tok, n_slots=len(ps)),
        DraftEngine.from_model(dm, tok, n_slots=len(ps)),
        k=k,
    )
    outs = gen.generate(ps, SamplingParams(temperature=0.0, max_tokens=max_tokens, **params))
    return [o.token_ids for o in outs]


def inprocess_sampled(target, draft, ps, max_tokens: int) -> list[list[int]]:
    tm, tok = load_checkpoint(target)
    dm, _ = load_checkpoint(draft)
    gen = SpeculativeGenerator(
        VerifyEngine(tm, tok, n_slots=len(ps)),
        DraftEngine.from_model(dm, tok, n_slots=len(ps)),
        k=4,
    )
    params = [
        SamplingParams(temperature=0.8, top_p=0.95, seed=7 + i, max_tokens=max_tokens)
        for i in range(len(ps))
    ]
    return [o.token_ids for o in gen.generate(ps, params)]


def inspected(node_id: int) -> dict:
    """``node_inspect`` of a node whose worker has reported."""
    got = node_inspect(node_id)
    assert got is not None, f"node {node_id} has not reported"
    return got


def submit(pipeline, p, max_tokens, **extra):
    return services.generation_submit(
        pipeline=pipeline,
        prompt="",
        prompt_tokens=p,
        params={"temperature": 0.0, "max_tokens": max_tokens, **extra},
        user=None,
    )


def test_greedy_through_workers_equals_inprocess_and_verifier_batches(
    live_server, tmp_path, settings
):
    settings.HEARTBEAT_PERIOD_S = 1
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline(
        "pair",
        target,
        draft,
        max_verify_batch=32,
        max_batch_wait_ms=20,
        k_policy={"mode": "fixed", "k": 4},
    )
    (drafter, _, _), (verifier, _, _) = nodes
    ps = prompts(16)
    expected = inprocess(target, draft, ps, max_tokens=24)
    with Workers(tmp_path, api_url=live_server.url) as workers:
        for node, role, token in nodes:
            workers.start(node, role, token)
        wait_online(nodes, workers)
        gens = [submit(pipeline, p, 24) for p in ps]
        streamed = wait_done([g.pk for g in gens], workers=workers)
        for g, want in zip(gens, expected, strict=True):
            events = streamed[str(g.pk)]
            assert events[-1]["type"] == "done", events[-1]
            assert tokens_of(events) == want
            assert events[-1]["usage"] == {
                "prompt_tokens": len(g.prompt_tokens),
                "completion_tokens": len(want),
            }
        # The row is written by the verifier's persister: wait for the last one.
        deadline = time.monotonic() + 20
        while Generation.objects.filter(state="finished").count() < len(gens):
            assert time.monotonic() < deadline, workers.logs()
            time.sleep(0.2)
        for g, want in zip(gens, expected, strict=True):
            g.refresh_from_db()
            assert g.output_tokens == want and g.drafter_id == drafter.pk
            assert g.first_token_at and g.itl_ms["n"] > 0 and g.counters["num_drafts"] > 0
        stats = inspected(verifier.pk)["stats"]
        assert stats["mean_batch"] > 1, stats  # many sequences verified per forward pass
        assert max(int(b) for b in stats["batch_size_hist"]) >= 8, stats

        # Cancel mid-generation frees the KV slots on BOTH nodes.
        long = [submit(pipeline, p, 200, ignore_eos=True) for p in prompts(4, seed=1)]
        deadline = time.monotonic() + 30
        while not all(tokens_of(e for _, e in stream_of(g.pk)) for g in long):
            assert time.monotonic() < deadline, workers.logs()
            time.sleep(0.1)
        assert inspected(verifier.pk)["slots_used"] == 4
        for g in long:
            services.generation_cancel(generation=g)
        deadline = time.monotonic() + 10
        while any(inspected(n.pk)["slots_used"] for n in (drafter, verifier)):
            assert time.monotonic() < deadline, (
                node_inspect(drafter.pk),
                node_inspect(verifier.pk),
            )
            time.sleep(0.1)
        for g in long:
            g.refresh_from_db()
            assert g.state == "cancelled"
        # Seeded sampling crosses the wire too (draft q as float16): same tokens as in-process.
        sampled = [
            submit(pipeline, p, 16, temperature=0.8, top_p=0.95, seed=7 + i)
            for i, p in enumerate(ps[:3])
        ]
        streamed = wait_done([g.pk for g in sampled], workers=workers)
        want_sampled = inprocess_sampled(target, draft, ps[:3], 16)
        assert [tokens_of(streamed[str(g.pk)]) for g in sampled] == want_sampled

        # A pipeline change reaches the running workers between rounds, without restart:
        # verify one sequence at a time, draft k=2; output stays the greedy output.
        Pipeline.objects.filter(pk=pipeline.pk).update(
            max_verify_batch=1, k_policy={"mode": "fixed", "k": 2}
        )
        pipeline.refresh_from_db()
        services.push_pipeline_config(pipeline)
        before = inspected(verifier.pk)["stats"]["batch_size_hist"]
        gens = [submit(pipeline, p, 12) for p in ps[:3]]
        streamed = wait_done([g.pk for g in gens], workers=workers)
        expected = inprocess(target, draft, ps[:3], max_tokens=12, k=2)
        assert [tokens_of(streamed[str(g.pk)]) for g in gens] == expected
        after = inspected(verifier.pk)["stats"]["batch_size_hist"]
        assert {b for b in after if after[b] != before.get(b, 0)} == {"1"}

        # the node heartbeats over HTTP (liveness and device; figures travel as signed samples)
        verifier.refresh_from_db()
        assert verifier.device_info["kind"] in ("cpu", "gpu") and verifier.last_seen
