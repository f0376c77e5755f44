"""The draft and verify loops in one process (messages handed over directly instead of
through the broker): n-gram drafting and plain decoding (drafter_kind none) reproduce the
in-process engine, and a config message changes k between rounds."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import OperationalError

from fleet.pipelines.models import Pipeline
from inference import report_services, services, wire
from inference.engine.checkpoints import load_checkpoint
from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator
from inference.engine.sampling import SamplingParams
from inference.models import Generation
from inference.selectors import stream_of
from inference.worker.engine_cache import load_verify_engine
from inference.worker.verify import VerifyLoop
from tests.worker.helpers import ledger_settled, make_pipeline, tokens_of, wait_done, write_pair
from tests.worker.loop_harness import run_loops
from tests.worker.test_workers import prompts


@pytest.mark.parametrize("kind", ["ngram", "none"])
def test_loops_reproduce_the_engine(kind, transactional_db, tmp_path, wired):
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline(f"loops-{kind}", target, draft, kind=kind, max_batch_wait_ms=5)
    run_loops(pipeline, nodes, wired, kind)
    ps = prompts(6, seed=5)
    gens = [
        services.generation_submit(
            pipeline=pipeline,
            prompt="",
            prompt_tokens=p,
            params={"temperature": 0, "max_tokens": 20},
            user=None,
        )
        for p in ps
    ]
    streamed = wait_done([g.pk for g in gens], timeout=60)
    tm, tok = load_checkpoint(target)
    drafter = DraftEngine.ngram() if kind == "ngram" else None
    want = SpeculativeGenerator(VerifyEngine(tm, tok, n_slots=6), drafter, k=4).generate(
        ps, SamplingParams(temperature=0, max_tokens=20)
    )
    assert [tokens_of(streamed[str(g.pk)]) for g in gens] == [o.token_ids for o in want]
    verifier = next(wired[n.pk] for n, r, _ in nodes if r == "verify")
    verifier.flush_writes()
    ledger_settled()
    assert Generation.objects.filter(state="finished").count() == len(gens)
    assert verifier.slots()["slots_used"] == 0
    for g in gens:  # the done event carries the counters the ledger got (return_spec_metrics)
        g.refresh_from_db()
        done = streamed[str(g.pk)][-1]
        assert done["spec"] == {name: g.counters[name] for name in wire.SPEC_FIELDS}
    if kind == "ngram":
        assert sum(streamed[str(g.pk)][-1]["spec"]["num_drafts"] for g in gens) > 0
    if kind == "ngram":
        assert all(g.drafter_id for g in gens)
        drafter_loop = next(wired[n.pk] for n, r, _ in nodes if r == "draft")
        deadline = time.monotonic() + 5
        while drafter_loop.slots()["seqs"]:  # finished sequences are freed on the drafter too
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # a live config change: k = 0 from the next round on (the drafter sends empty drafts)
        Pipeline.objects.filter(pk=pipeline.pk).update(k_policy={"mode": "fixed", "k": 0})
        pipeline.refresh_from_db()
        services.push_pipeline_config(pipeline)
        g = services.generation_submit(
            pipeline=pipeline,
            prompt="",
            prompt_tokens=ps[0],
            params={"temperature": 0, "max_tokens": 20},
            user=None,
        )
        assert tokens_of(wait_done([g.pk], timeout=60)[str(g.pk)]) == want[0].token_ids
        assert drafter_loop.config["k_policy"] == {"mode": "fixed", "k": 0}
        verifier.flush_writes()
        ledger_settled()
        g.refresh_from_db()
        assert g.counters["num_drafts"] == 0  # no draft tokens were verified
    else:
        assert not any(g.drafter_id for g in gens)


def test_verifier_claims_off_the_loop_retries_a_failed_claim_and_skips_ended_rows(
    transactional_db, tmp_path, wired, monkeypatch
):
    """Claims are applied by the ledger consumer (never in a round, never by the node); a
    claim that fails there (database away) is retried and its generations still finish; a
    start whose row ended before the claim streams nothing (it is prefilled while the claim
    travels, then dropped when the ledger refuses it) and frees its KV slot."""
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline("claims", target, draft, kind="none", max_batch_wait_ms=5)
    real_claim, threads, calls = report_services.generations_claim, [], []

    def claim(**kwargs):
        threads.append(threading.current_thread().name)
        calls.append(kwargs["starts"])
        if len(calls) == 1:
            raise OperationalError("database is locked")
        return real_claim(**kwargs)

    monkeypatch.setattr(report_services, "generations_claim", claim)
    run_loops(pipeline, nodes, wired, "none")
    verifier_node = next(n for n, r, _ in nodes if r == "verify")
    verifier = wired[verifier_node.pk]
    ps = prompts(3, seed=9)
    params = {"temperature": 0, "max_tokens": 12}
    gens = [
        services.generation_submit(
            pipeline=pipeline, prompt="", prompt_tokens=p, params=params, user=None
        )
        for p in ps
    ]
    streamed = wait_done([g.pk for g in gens], timeout=60)
    tm, tok = load_checkpoint(target)
    want = SpeculativeGenerator(VerifyEngine(tm, tok, n_slots=3)).generate(
        ps, SamplingParams(temperature=0, max_tokens=12)
    )
    assert [tokens_of(streamed[str(g.pk)]) for g in gens] == [o.token_ids for o in want]
    assert len(calls) >= 2 and set(threads) == {"ledger"}
    # a row cancelled before its start is claimed: nothing is prefilled or streamed
    ended = Generation.objects.create(
        pipeline=pipeline,
        prompt_tokens=ps[0],
        params=params,
        verifier=verifier_node,
        attempts=1,
        state="cancelled",
    )
    verifier.deliver("start", services.start_payload(ended))
    n_calls = len(calls)
    deadline = time.monotonic() + 10
    while len(calls) == n_calls:  # the redelivered start was claimed (and refused)
        assert time.monotonic() < deadline
        time.sleep(0.05)
    verifier.flush_writes()
    ledger_settled()
    time.sleep(0.3)  # the refusal reached the verifier by now
    assert not tokens_of([e for _, e in stream_of(ended.pk)])
    assert verifier.slots()["slots_used"] == 0 and str(ended.pk) not in verifier.seqs


def test_new_sequences_join_the_running_draft_group(transactional_db, tmp_path, wired):
    """A sequence started while others of its drafter are in flight reaches the drafter with
    their next results (one message, one draft batch), and the output stays exact."""
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline("join", target, draft, kind="ngram", max_batch_wait_ms=5)
    run_loops(pipeline, nodes, wired, "ngram")
    drafter_id = next(n.pk for n, r, _ in nodes if r == "draft")
    seen: list[tuple[str, dict]] = []
    deliver = wire.send_from

    def send_from(sender, node, kind, p):
        if node == drafter_id:
            seen.append((kind, p))
        deliver(sender, node, kind, p)

    wire.send_from = send_from  # the wired fixture's monkeypatch restores the original
    ps = prompts(6, seed=11)
    params = {"temperature": 0, "max_tokens": 60, "ignore_eos": True}
    gens = []
    for p in ps:  # staggered: each arrives while the earlier ones are being drafted
        gens.append(
            services.generation_submit(
                pipeline=pipeline, prompt="", prompt_tokens=p, params=params, user=None
            )
        )
        time.sleep(0.05)
    streamed = wait_done([g.pk for g in gens], timeout=60)
    tm, tok = load_checkpoint(target)
    gen = SpeculativeGenerator(VerifyEngine(tm, tok, n_slots=6), DraftEngine.ngram(), k=4)
    want = gen.generate(ps, SamplingParams(temperature=0, max_tokens=60, ignore_eos=True))
    assert [tokens_of(streamed[str(g.pk)]) for g in gens] == [o.token_ids for o in want]
    joined = [s["gen"] for kind, p in seen if kind == "results" for s in p.get("seqs", [])]
    alone = [s["gen"] for kind, p in seen if kind == "draft_start" for s in p["seqs"]]
    assert joined, "no new sequence rode along with a results message"
    assert sorted(joined + alone) == sorted(str(g.pk) for g in gens)  # each started once


def test_a_rerouted_start_that_overtakes_the_old_attempts_cancel_replaces_it(
    transactional_db, tmp_path, wired
):
    """Starts come on the node's Redis list, cancels through the broker: a re-route back to
    the same verifier may deliver attempt 2's start while attempt 1 still runs there. The
    new attempt replaces the old one and resumes exactly; the late cancel of attempt 1
    leaves attempt 2 alone."""
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline("reroute", target, draft, kind="none", max_batch_wait_ms=5)
    run_loops(pipeline, nodes, wired, "none")
    verifier = next(wired[n.pk] for n, r, _ in nodes if r == "verify")
    p = prompts(1, seed=13)[0]
    params = {"temperature": 0, "max_tokens": 220, "ignore_eos": True}
    g = services.generation_submit(
        pipeline=pipeline, prompt="", prompt_tokens=p, params=params, user=None
    )
    deadline = time.monotonic() + 20
    while str(g.pk) not in verifier.seqs:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    Generation.objects.filter(pk=g.pk).update(state="queued", attempts=2)
    g.refresh_from_db()
    start = services.start_payload(g)  # what a re-route sends: it resumes from the stream
    start["resume"] = [e for _, e in stream_of(g.pk) if e.get("type") == "tokens"]
    verifier.deliver("start", start)
    while not Generation.objects.filter(pk=g.pk, state="running").exists():  # claimed
        assert time.monotonic() < deadline
        time.sleep(0.002)
    time.sleep(0.05)  # the loop takes the claimed start; only then the old cancel comes
    verifier.deliver("cancel", {"gen": str(g.pk), "attempt": 1})
    events = wait_done([g.pk], timeout=60)[str(g.pk)]
    tm, tok = load_checkpoint(target)
    want = SpeculativeGenerator(VerifyEngine(tm, tok, n_slots=1)).generate(
        [p], SamplingParams(temperature=0, max_tokens=220, ignore_eos=True)
    )[0]
    assert events[-1]["type"] == "done"
    assert tokens_of(events) == want.token_ids
    verifier.flush_writes()
    ledger_settled()
    g.refresh_from_db()
    assert (g.state, g.attempts, g.output_tokens) == ("finished", 2, want.token_ids)


def test_a_claim_confirmed_during_the_prefill_streams_before_the_round(tmp_path, monkeypatch):
    """TTFT: the ledger's answer to a claim that arrives while the verifier prefills is
    handled in the same step, so the first tokens go out before the verify round that
    follows (not a whole round later)."""
    target, _draft = write_pair(tmp_path)
    loop = VerifyLoop(
        engine=load_verify_engine(str(target)),
        node_id=1,
        pipeline_id=1,
        config={"max_verify_batch": 8, "max_batch_wait_ms": 0},
    )
    order: list[str] = []

    def report(kind, **body):  # a ledger that answers at once
        if kind == "claim":
            loop.deliver("claimed", {"starts": body["starts"], "refused": []})

    verify = loop.engine.verify

    def verifying(items):
        order.append("verify")
        return verify(items)

    monkeypatch.setattr(loop, "report", report)
    monkeypatch.setattr(loop.engine, "verify", verifying)
    monkeypatch.setattr(
        wire, "publish_many", lambda items, node: order.extend(e["type"] for _, e in items)
    )
    loop.deliver(
        "start",
        {
            "gen": "g1",
            "attempt": 1,
            "pipeline": 1,
            "prompt_tokens": [10, 11, 12, 13],
            "params": {"temperature": 0, "max_tokens": 8},
            "drafter": None,
            "created": time.time(),
        },
    )
    loop.step()
    assert order[:2] == ["tokens", "verify"], order


def test_adaptive_k_through_the_real_loops_is_exact_and_measured(transactional_db, tmp_path, wired):
    """An adaptive pipeline on the real engines: the drafter's start-up sweep, the verifier's
    cost table and round times (riding on its results) and the acceptance of each round all
    reach the drafter's choice, the k it chose is traced round by round, and the output is
    the plain engine's token for token."""
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline(
        "adaptive",
        target,
        draft,
        kind="model",
        max_batch_wait_ms=5,
        k_policy={"mode": "adaptive", "k_min": 0, "k_max": 6, "k": 3},
    )
    run_loops(pipeline, nodes, wired, "model")
    ps = prompts(4, seed=21)
    gens = [
        services.generation_submit(
            pipeline=pipeline,
            prompt="",
            prompt_tokens=p,
            params={"temperature": 0, "max_tokens": 24},
            user=None,
        )
        for p in ps
    ]
    streamed = wait_done([g.pk for g in gens], timeout=120)
    tm, tok = load_checkpoint(target)
    want = SpeculativeGenerator(VerifyEngine(tm, tok, n_slots=4)).generate(
        ps, SamplingParams(temperature=0, max_tokens=24)
    )
    assert [tokens_of(streamed[str(g.pk)]) for g in gens] == [o.token_ids for o in want]
    drafter = next(wired[n.pk] for n, r, _ in nodes if r == "draft")
    verifier = next(wired[n.pk] for n, r, _ in nodes if r == "verify")
    snap = drafter.inspect()["adaptive"]
    assert snap["sweep_s"] is not None and snap["draft_costs"]
    assert snap["verify_costs"], "the verifier's cost table never reached the drafter"
    assert snap["hop_ms"] is not None and snap["acceptance"]["rounds"] > 0
    assert verifier.inspect()["step_costs"] and verifier.sweep_s is not None
    trace = drafter.inspect()["k_trace"]
    assert trace and all(0 <= k <= 6 for _t, _b, k in trace)


def test_drafts_lost_in_transit_degrade_one_sequence_and_strand_no_other(
    transactional_db, tmp_path, wired, monkeypatch
):
    """A drafts message lost on the way (as with a Redis restart, whose last second of writes
    is not on disk): the verifier stops waiting once the drafts are overdue, decodes that
    sequence plainly and tells the drafter to drop it; a sequence started meanwhile, whose
    draft_start waited to ride on that drafter's next results, is drafted too. Both outputs
    stay exact. Before, both waited until their deadline
    (tests/foundation/test_up_redis_restart.py stranded a request so, 1 run in 3)."""
    monkeypatch.setattr(VerifyLoop, "OVERDUE_MIN_S", 0.5, raising=False)
    monkeypatch.setattr(VerifyLoop, "OVERDUE_TURNAROUNDS", 1, raising=False)
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline("lost", target, draft, kind="ngram", max_batch_wait_ms=5)
    run_loops(pipeline, nodes, wired, "ngram")
    drafter_id = next(n.pk for n, r, _ in nodes if r == "draft")
    verifier = next(wired[n.pk] for n, r, _ in nodes if r == "verify")
    lose = threading.Event()
    lost: list[dict] = []
    deliver = wire.send_from

    def send_from(sender, node, kind, p):
        if sender == drafter_id and kind == "drafts" and lose.is_set() and not lost:
            lost.append(p)  # gone with the old Redis
            return
        deliver(sender, node, kind, p)

    wire.send_from = send_from  # the wired fixture's monkeypatch restores the original
    ps = prompts(2, seed=17)
    params = {"temperature": 0, "max_tokens": 40, "ignore_eos": True}

    def submit(p):
        return services.generation_submit(
            pipeline=pipeline, prompt="", prompt_tokens=p, params=params, user=None
        )

    first = submit(ps[0])
    deadline = time.monotonic() + 20
    while str(first.pk) not in verifier.sent_at:  # its drafts are being made
        assert time.monotonic() < deadline
        time.sleep(0.002)
    lose.set()
    while not lost:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    second = submit(ps[1])
    streamed = wait_done([first.pk, second.pk], timeout=30)
    tm, tok = load_checkpoint(target)
    gen = SpeculativeGenerator(VerifyEngine(tm, tok, n_slots=2), DraftEngine.ngram(), k=4)
    want = gen.generate(ps, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))
    assert [tokens_of(streamed[str(g.pk)]) for g in (first, second)] == [o.token_ids for o in want]
    assert verifier.stats.degraded >= 1
