"""Log-probabilities through the draft and verify loops (in one process, as test_loops): the
prompt's and the sampled tokens', more starts than KV slots, and a resumed attempt."""

from __future__ import annotations

import time

from inference import services
from inference.engine.checkpoints import load_checkpoint
from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator
from inference.engine.sampling import SamplingParams
from inference.models import Generation
from inference.selectors import stream_of
from tests.worker.helpers import make_pipeline, tokens_of, wait_done, write_pair
from tests.worker.loop_harness import run_loops
from tests.worker.test_workers import prompts


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
    run_loops(pipeline, nodes, wired, "ngram")
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
    run_loops(pipeline, nodes, wired, "none")
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
