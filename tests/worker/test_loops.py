"""The draft and verify loops in one process (messages handed over directly instead of
through the broker): n-gram drafting and plain decoding (drafter_kind none) reproduce the
in-process engine, and a config message changes k between rounds."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import OperationalError, connections
from django.utils import timezone

from fleet.nodes.signing import token_key
from fleet.pipelines.models import Pipeline
from inference import report_services, services, wire
from inference.engine.checkpoints import load_checkpoint
from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator
from inference.engine.sampling import SamplingParams
from inference.ledger import Ledger
from inference.models import Generation
from inference.selectors import stream_of
from inference.worker import engine_loop
from inference.worker.draft import DraftLoop
from inference.worker.engine_cache import load_draft_engine, load_verify_engine
from inference.worker.verify import VerifyLoop
from tests.worker.helpers import ledger_settled, make_pipeline, tokens_of, wait_done, write_pair
from tests.worker.test_workers import prompts


@pytest.fixture
def wired(monkeypatch, transactional_db):
    """Loops by node id; wire.send and wire.send_from deliver straight into the target loop
    (a peer's message named by its sender, as `wire.receive` does). The ledger consumer runs
    in a thread of its own (it applies the verifier's reports)."""
    loops: dict[int, engine_loop.BaseLoop] = {}
    monkeypatch.setattr(wire, "send", lambda node, kind, p: loops[node].deliver(kind, p))

    def send_from(sender, node, kind, p):
        stamped = wire._stamped(sender, kind, p)
        assert stamped is not None, (kind, p)
        loops[node].deliver(*stamped)

    monkeypatch.setattr(wire, "send_from", send_from)
    stop = threading.Event()

    def consume():
        try:
            Ledger().run(stop)
        finally:
            connections.close_all()

    consumer = threading.Thread(target=consume, name="ledger", daemon=True)
    consumer.start()
    yield loops
    for loop in loops.values():
        loop.stop()
    stop.set()
    consumer.join(10)


def _run(pipeline, nodes, wired, kind):
    config = pipeline.config()
    peers = [n.pk for n, _role, _token in nodes]  # as the node session names them
    for node, role, token in nodes:
        key = token_key(node.pk, token)
        if role == "verify":
            loop: VerifyLoop | DraftLoop = VerifyLoop(
                engine=load_verify_engine(pipeline.target_model),
                node_id=node.pk,
                pipeline_id=pipeline.pk,
                config=config,
                key=key,
                peers=peers,
            )
        else:
            loop = DraftLoop(
                engine=load_draft_engine(kind, pipeline.draft_model),
                node_id=node.pk,
                pipeline_id=pipeline.pk,
                config=config,
                key=key,
                peers=peers,
            )
        wired[node.pk] = loop
        loop.start()
        assert loop.prepared.wait(30), "the loop's start-up cost sweep did not end"
        node.last_seen = timezone.now()
        node.state = "online"
        node.save()


@pytest.mark.parametrize("kind", ["ngram", "none"])
def test_loops_reproduce_the_engine(kind, transactional_db, tmp_path, wired):
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline(f"loops-{kind}", target, draft, kind=kind, max_batch_wait_ms=5)
    _run(pipeline, nodes, wired, kind)
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
    _run(pipeline, nodes, wired, "none")
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
    _run(pipeline, nodes, wired, "ngram")
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
    _run(pipeline, nodes, wired, "none")
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


def _close(a, b, tol=1e-4) -> bool:
    """Logprob entries equal to tol: [lp, [[id, lp], ...]] (None for a prompt's first)."""
    if a is None or b is None:
        return a is None and b is None
    return (
        abs(a[0] - b[0]) <= tol
        and [i for i, _ in a[1]] == [i for i, _ in b[1]]
        and all(abs(x - y) <= tol for (_, x), (_, y) in zip(a[1], b[1], strict=True))
    )


def test_logprobs_through_the_loops_and_more_starts_than_kv_slots(
    transactional_db, tmp_path, wired, monkeypatch
):
    """Six sequences asking for token and prompt logprobs on a verifier with two KV slots:
    the starts that do not fit wait on the verifier (none fails), and each stream carries
    the in-process engine's tokens and logprobs."""
    monkeypatch.setenv("TANDEM_NODE_SLOTS", "2")
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline("lp", target, draft, kind="ngram", max_batch_wait_ms=5)
    _run(pipeline, nodes, wired, "ngram")
    verifier = next(wired[n.pk] for n, r, _ in nodes if r == "verify")
    assert verifier.engine.cache.n_slots == 2
    ps = prompts(6, seed=3)
    params = {"temperature": 0, "max_tokens": 12, "logprobs": 2, "prompt_logprobs": 1}
    gens = [
        services.generation_submit(
            pipeline=pipeline, prompt="", prompt_tokens=p, params=params, user=None
        )
        for p in ps
    ]
    streamed = wait_done([g.pk for g in gens], timeout=60)
    tm, tok = load_checkpoint(target)
    want = SpeculativeGenerator(VerifyEngine(tm, tok, n_slots=6), DraftEngine.ngram(), k=4)
    outs = want.generate(
        ps, SamplingParams(temperature=0, max_tokens=12, logprobs=2, prompt_logprobs=1)
    )
    for g, o in zip(gens, outs, strict=True):
        events = streamed[str(g.pk)]
        assert events[-1]["type"] == "done", events[-1]
        assert tokens_of(events) == o.token_ids
        got = [e for ev in events if ev["type"] == "tokens" for e in ev["logprobs"]]
        assert o.logprobs is not None and o.prompt_logprobs is not None
        assert len(got) == len(o.token_ids)
        assert all(_close(a, b) for a, b in zip(got, o.logprobs, strict=True))
        prompt_lp = events[0]["prompt_logprobs"]
        assert len(prompt_lp) == len(o.prompt_ids)
        assert all(_close(a, b) for a, b in zip(prompt_lp, o.prompt_logprobs, strict=True))
        assert sum("prompt_logprobs" in ev for ev in events) == 1


def test_a_resumed_attempt_sends_the_prompts_logprobs_only(transactional_db, tmp_path, wired):
    """A re-routed attempt prefills prompt + the tokens already streamed: the logprobs it
    sends as the prompt's are the prompt's alone, and equal the first attempt's."""
    target, draft = write_pair(tmp_path)
    pipeline, nodes = make_pipeline("relp", target, draft, kind="none", max_batch_wait_ms=5)
    _run(pipeline, nodes, wired, "none")
    verifier = next(wired[n.pk] for n, r, _ in nodes if r == "verify")
    p = prompts(1, seed=13)[0]
    params = {"temperature": 0, "max_tokens": 220, "ignore_eos": True, "prompt_logprobs": 0}
    g = services.generation_submit(
        pipeline=pipeline, prompt="", prompt_tokens=p, params=params, user=None
    )
    deadline = time.monotonic() + 20
    while len(tokens_of([e for _, e in stream_of(g.pk)])) < 5:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    Generation.objects.filter(pk=g.pk).update(state="queued", attempts=2)
    g.refresh_from_db()
    verifier.deliver("start", services.start_payload(g))
    events = wait_done([g.pk], timeout=60)[str(g.pk)]
    sent = [e["prompt_logprobs"] for e in events if "prompt_logprobs" in e]
    assert len(sent) == 2  # one per attempt
    assert len(sent[0]) == len(sent[1]) == len(p)
    assert all(_close(a, b) for a, b in zip(sent[0], sent[1], strict=True))


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
    _run(pipeline, nodes, wired, "model")
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
