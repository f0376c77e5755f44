"""Target logprobs from the verify engine: emitted tokens (greedy and sampled, speculative or
plain) and prompts (the prefill, max_tokens 0 included), checked against a direct no-cache
forward of the target model."""

import pytest
import torch

from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator
from inference.engine.sampling import SamplingParams
from tests.engine.helpers import tiny_model

MAX_LEN = 64
PROMPTS = [[(5 * i + j) % 60 + 2 for j in range(1 + 2 * i)] for i in range(6)]  # lengths 1..11


@pytest.fixture(scope="module")
def target():
    return tiny_model(0, std=0.3)


@pytest.fixture(scope="module")
def draft_model():
    return tiny_model(1, std=0.3)


@torch.no_grad()
def direct_logprobs(model, ids: list[int]) -> torch.Tensor:
    """log_softmax of the raw logits of one plain causal forward: row i predicts ids[i+1]."""
    return model(torch.tensor([ids]))[0].float().log_softmax(-1)


def _generate(target, draft_model, kind, params, prompts=PROMPTS, wire=False):
    verify = VerifyEngine(target, n_slots=8, max_len=MAX_LEN)
    draft = None
    if kind == "ngram":
        draft = DraftEngine.ngram(1, 3)
    elif kind == "model":
        draft = DraftEngine.from_model(draft_model, n_slots=8, max_len=MAX_LEN)
    return SpeculativeGenerator(verify, draft, k=4, wire=wire).generate(prompts, params), verify


def _check_emitted(target, outs, top):
    for o in outs:
        assert o.logprobs is not None and len(o.logprobs) == len(o.token_ids)
        lp = direct_logprobs(target, o.prompt_ids + o.token_ids)
        P = len(o.prompt_ids)
        for j, (tok, (got, alts)) in enumerate(zip(o.token_ids, o.logprobs, strict=True)):
            row = lp[P - 1 + j]
            assert got == pytest.approx(row[tok].item(), abs=1e-4)
            assert len(alts) == top
            want = row.topk(top)
            assert [a for a, _ in alts] == want.indices.tolist()
            assert [v for _, v in alts] == pytest.approx(want.values.tolist(), abs=1e-4)


@pytest.mark.parametrize("kind", ["plain", "model", "ngram"])
def test_greedy_logprobs_equal_a_direct_forward(target, draft_model, kind):
    params = SamplingParams(temperature=0, max_tokens=12, logprobs=3)
    outs, _ = _generate(target, draft_model, kind, params)
    _check_emitted(target, outs, 3)
    for o in outs:  # greedy: the emitted token is the most likely one
        pairs = zip(o.token_ids, o.logprobs, strict=True)
        assert all(alts[0][0] == tok for tok, (_, alts) in pairs)


@pytest.mark.parametrize("kind", ["plain", "model"])
def test_sampled_logprobs_are_of_the_raw_target_distribution(target, draft_model, kind):
    """vLLM's default (raw_logprobs): before temperature/top-k/top-p."""
    params = SamplingParams(temperature=1.7, top_k=10, seed=3, max_tokens=12, logprobs=0)
    outs, _ = _generate(target, draft_model, kind, params)
    _check_emitted(target, outs, 0)


def test_speculative_logprobs_equal_plain_decoding_and_survive_the_wire(target, draft_model):
    params = SamplingParams(temperature=0, max_tokens=12, logprobs=2)
    plain, _ = _generate(target, draft_model, "plain", params)
    spec, _ = _generate(target, draft_model, "model", params, wire=True)
    for a, b in zip(plain, spec, strict=True):
        assert a.token_ids == b.token_ids
        for (x, xs), (y, ys) in zip(a.logprobs, b.logprobs, strict=True):
            assert x == pytest.approx(y, abs=1e-4)
            assert [i for i, _ in xs] == [i for i, _ in ys]


def test_prompt_logprobs_with_max_tokens_zero_only_score_the_prompt(target):
    verify = VerifyEngine(target, n_slots=4, max_len=MAX_LEN)
    free = verify.n_free
    items: list = [
        (f"s{i}", p, SamplingParams(temperature=0, max_tokens=0, prompt_logprobs=1))
        for i, p in enumerate(PROMPTS[:4])
    ]
    results = verify.add_many(items)
    assert verify.n_free == free  # the slots went back at once
    for (_, prompt, _), r in zip(items, results, strict=True):
        assert r.finished and r.tokens == [] and r.finish_reason == "length"
        assert r.logprobs is None and r.prompt_logprobs is not None
        assert len(r.prompt_logprobs) == len(prompt) and r.prompt_logprobs[0] is None
        lp = direct_logprobs(target, prompt)
        for i, (got, alts) in enumerate(r.prompt_logprobs[1:]):
            assert got == pytest.approx(lp[i, prompt[i + 1]].item(), abs=1e-4)
            assert alts[0][0] == lp[i].argmax().item()
    assert verify.verify([(sid, [], None) for sid, _, _ in items])[0].tokens == []


def test_prompt_and_token_logprobs_together_and_none_when_not_asked(target, draft_model):
    params = [
        SamplingParams(temperature=0, max_tokens=6, logprobs=1, prompt_logprobs=0),
        SamplingParams(temperature=0, max_tokens=6),
    ]
    outs, _ = _generate(target, draft_model, "model", params, prompts=PROMPTS[2:4], wire=True)
    asked, plain = outs
    lp = direct_logprobs(target, asked.prompt_ids)
    assert [e and e[0] for e in asked.prompt_logprobs[1:]] == pytest.approx(
        [lp[i, t].item() for i, t in enumerate(asked.prompt_ids[1:])], abs=1e-4
    )
    assert all(alts == [] for _, alts in asked.prompt_logprobs[1:])
    assert len(asked.logprobs) == len(asked.token_ids)
    assert plain.logprobs is None and plain.prompt_logprobs is None


def test_logprobs_are_cut_with_the_tokens_at_a_stop(target, draft_model):
    free, _ = _generate(target, draft_model, "model", SamplingParams(temperature=0, max_tokens=12))
    stop = free[3].token_ids[4]
    params = SamplingParams(temperature=0, max_tokens=12, logprobs=0, stop_token_ids=[stop])
    outs, _ = _generate(target, draft_model, "model", params)
    o = outs[3]
    assert o.finish_reason == "stop" and len(o.token_ids) <= 5
    assert len(o.logprobs) == len(o.token_ids)


def test_results_without_logprobs_carry_no_logprob_fields(target):
    verify = VerifyEngine(target, n_slots=2, max_len=MAX_LEN)
    r = verify.add("a", [3, 4, 5], SamplingParams(temperature=0, max_tokens=4))
    assert "logprobs" not in r.to_json() and "prompt_logprobs" not in r.to_json()


def test_long_prompts_are_scored_in_chunks_with_the_same_result(target, monkeypatch):
    from inference.engine import logprobs

    prompt = [(7 * j) % 60 + 2 for j in range(40)]
    verify = VerifyEngine(target, n_slots=1, max_len=MAX_LEN)
    params = SamplingParams(temperature=0, max_tokens=0, prompt_logprobs=2)
    whole = verify.add("a", prompt, params).prompt_logprobs
    verify.free("a")
    monkeypatch.setattr(logprobs, "PROMPT_CHUNK", 7)
    chunked = verify.add("b", prompt, params).prompt_logprobs
    assert whole is not None and chunked is not None and len(chunked) == len(prompt)
    assert [e and e[0] for e in chunked] == pytest.approx([e and e[0] for e in whole], abs=1e-6)


def test_rows_asking_for_different_tops_share_one_batch(target, draft_model):
    tops = [0, 3, None, 5, 1, None]
    params = [SamplingParams(temperature=0, max_tokens=10, logprobs=t) for t in tops]
    outs, _ = _generate(target, draft_model, "model", params)
    for o, top in zip(outs, tops, strict=True):
        if top is None:
            assert o.logprobs is None
        else:
            _check_emitted(target, [o], top)
