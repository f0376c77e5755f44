"""Speculative decoding end to end through the split engines (tiny random models, fp32)."""

import random

import pytest
import torch

from inference.engine.engines import DraftEngine, IncompatibleDrafter, PromptTooLong, VerifyEngine
from inference.engine.generator import SpeculativeGenerator, generate
from inference.engine.sampling import SamplingParams
from tests.engine.helpers import tiny_model, word_tokenizer

MAX_LEN = 64
GREEDY = SamplingParams(temperature=0, max_tokens=24)
PROMPTS8 = [[(3 * i + j) % 60 + 2 for j in range(1 + 3 * i)] for i in range(8)]  # lengths 1..22


@pytest.fixture(scope="module")
def target():
    return tiny_model(0, std=0.3)


@pytest.fixture(scope="module")
def draft_model():
    return tiny_model(1, std=0.3)


def _verify(model, n_slots=8, **kw):
    return VerifyEngine(model, n_slots=n_slots, max_len=MAX_LEN, **kw)


def _drafter(kind, target, draft_model, n_slots=8):
    if kind == "ngram":
        return DraftEngine.ngram(1, 3)
    return DraftEngine.from_model(
        target if kind == "self" else draft_model, n_slots=n_slots, max_len=MAX_LEN
    )


@torch.no_grad()
def _assert_target_argmax(model, outs):
    """Re-score every final sequence in ONE no-cache forward: each generated token must be
    the target's argmax given everything before it."""
    seqs = [o.prompt_ids + o.token_ids for o in outs]
    T = max(map(len, seqs))
    logits = model(torch.tensor([s + [0] * (T - len(s)) for s in seqs]))
    for o, lg in zip(outs, logits, strict=True):
        P = len(o.prompt_ids)
        pred = lg[P - 1 : P - 1 + len(o.token_ids)].argmax(-1).tolist()
        assert pred == o.token_ids


@pytest.mark.parametrize("kind", ["random", "self", "ngram"])
@pytest.mark.parametrize("batch", [1, 8])
def test_greedy_speculative_equals_plain_greedy(target, draft_model, kind, batch):
    prompts = PROMPTS8[-batch:]
    ref = generate(_verify(target), prompts, GREEDY)
    _assert_target_argmax(target, ref)
    gen = SpeculativeGenerator(_verify(target), _drafter(kind, target, draft_model), k=3)
    outs = gen.generate(prompts, GREEDY)
    assert [o.token_ids for o in outs] == [r.token_ids for r in ref]
    assert all(len(o.token_ids) == 24 and o.finish_reason == "length" for o in outs)
    if kind == "self":
        assert gen.counters.acceptance_rate >= 0.98


def test_greedy_with_k_varying_per_round_and_sequence_and_queueing(target, draft_model):
    ref = generate(_verify(target), PROMPTS8, GREEDY)
    rnd = random.Random(0)
    gen = SpeculativeGenerator(
        _verify(target, n_slots=3),
        _drafter("random", target, draft_model, n_slots=3),
        k=lambda sid: rnd.randint(0, 5),
    )
    outs = gen.generate(PROMPTS8, GREEDY)  # 8 requests through 3 slots: slots are reused
    assert [o.token_ids for o in outs] == [r.token_ids for r in ref]
    assert sorted(gen.counters.verify_batch_sizes) == [1, 2, 3]


@pytest.mark.parametrize("kind", ["self", "random"])
def test_sampled_self_draft_acceptance_and_batch_invariance(target, draft_model, kind):
    params = [
        SamplingParams(temperature=0.9, top_k=20 + i, top_p=0.95, seed=100 + i, max_tokens=20)
        for i in range(8)
    ]
    gen = SpeculativeGenerator(_verify(target), _drafter(kind, target, draft_model), k=3, wire=True)
    batch = gen.generate(PROMPTS8, params)
    if kind == "self":
        assert gen.counters.acceptance_rate >= 0.98
    for i in (0, 5):  # the same seeded request alone, with a different k schedule of others
        alone = SpeculativeGenerator(_verify(target), _drafter(kind, target, draft_model), k=3)
        assert alone.generate([PROMPTS8[i]], params[i])[0].token_ids == batch[i].token_ids
    # in-process (tensors) and JSON-wire runs agree
    again = SpeculativeGenerator(_verify(target), _drafter(kind, target, draft_model), k=3)
    assert [o.token_ids for o in again.generate(PROMPTS8, params)] == [o.token_ids for o in batch]


@pytest.mark.slow  # 20-60 s each on 2 shared cores: 20k sequences through the engines
@torch.no_grad()
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("kind", ["random", "ngram"])
def test_sampled_distribution_equals_target(kind, k):
    """Tokens 2 and 3 (the first speculative round) over N seeds in one big batch; their exact
    marginals come from the target over all V and V^2 continuations."""
    V, N = 8, 20_000  # TV sampling noise at this N is ~0.005
    target, drafter = tiny_model(0, vocab_size=V, std=0.5), tiny_model(1, vocab_size=V, std=0.5)
    prompt = [3, 5]
    if kind == "ngram":  # every token v followed by a likely successor: lookups always match
        ctx = torch.tensor([list(range(V)) + [0, v] for v in range(V)])
        prompt = [t for v, g in enumerate(target(ctx)[:, -1].argmax(-1).tolist()) for t in (v, g)]
    params = [SamplingParams(temperature=1.0, seed=s, max_tokens=2 + k) for s in range(N)]
    de = (
        DraftEngine.ngram(1, 2)
        if kind == "ngram"
        else DraftEngine.from_model(drafter, n_slots=N, max_len=24)
    )
    gen = SpeculativeGenerator(VerifyEngine(target, n_slots=N, max_len=24), de, k=k)
    outs = gen.generate([prompt] * N, params)
    toks = torch.tensor([o.token_ids[:3] for o in outs])
    P = len(prompt)
    ctx1 = torch.tensor([prompt + [a] for a in range(V)])
    p1 = target(torch.tensor([prompt])).softmax(-1)[0, -1]
    p2 = target(ctx1).softmax(-1)[:, -1]  # [V, V]: p(t2 | t1)
    ctx2 = torch.tensor([prompt + [a, b] for a in range(V) for b in range(V)])
    p3 = target(ctx2).softmax(-1)[:, -1].view(V, V, V)  # p(t3 | t1, t2)
    joint12 = p1[:, None] * p2
    m2, m3 = joint12.sum(0), (joint12[..., None] * p3).sum((0, 1))
    for j, m in ((1, m2), (2, m3)):
        emp = torch.bincount(toks[:, j], minlength=V) / N
        assert 0.5 * (emp - m).abs().sum() < 0.01, (j, P)
    assert gen.counters.num_draft_tokens >= N * k and gen.counters.num_accepted_tokens > N // 10
    if kind == "random" and k == 1:  # acceptance rate == E[sum(min(p, q))]
        q2 = drafter(ctx1).softmax(-1)[:, -1]
        expected = (p1 * torch.minimum(p2, q2).sum(-1)).sum()
        assert abs(gen.counters.num_accepted_tokens_per_pos[0] / N - expected) < 0.015


def test_stops_inside_a_draft(target, tokenizer):
    prompt = PROMPTS8[4]
    ref = generate(_verify(target), [prompt], GREEDY)[0].token_ids
    eos, i = next((t, i) for i, t in enumerate(ref) if i >= 4 and t not in ref[:i])
    self_draft = lambda: _drafter("self", target, None)  # noqa: E731
    # EOS: self-draft proposes past it; the verifier cuts the round at the EOS
    gen = SpeculativeGenerator(_verify(target, eos_token_ids=[eos]), self_draft(), k=5)
    out = gen.generate([prompt], GREEDY)[0]
    assert out.token_ids == ref[: i + 1] and (out.finish_reason, out.stop_reason) == ("stop", eos)
    # max_tokens in the middle of a draft
    out = SpeculativeGenerator(_verify(target), self_draft(), k=5).generate(
        [prompt], SamplingParams(temperature=0, max_tokens=7)
    )[0]
    assert out.token_ids == ref[:7] and out.finish_reason == "length"
    # stop string (decoded text) in the middle of a draft
    stop = tokenizer.decode(ref[i - 1 : i + 1])
    params = SamplingParams(temperature=0, max_tokens=24, stop=[stop])
    plain = generate(_verify(target, tokenizer=tokenizer), [prompt], params)[0]
    spec = SpeculativeGenerator(_verify(target, tokenizer=tokenizer), self_draft(), k=5).generate(
        [prompt], params
    )[0]
    assert spec.token_ids == plain.token_ids and len(spec.token_ids) <= i + 1
    assert (spec.finish_reason, spec.stop_reason) == ("stop", stop)
    assert spec.text is not None and stop in spec.text


def test_edge_cases(target, draft_model, tokenizer):
    v = _verify(target, n_slots=2)
    with pytest.raises(ValueError, match="empty prompt"):
        v.add("a", [], GREEDY)
    with pytest.raises(PromptTooLong):
        v.add("b", list(range(MAX_LEN)), GREEDY)
    r = v.add("c", [1, 2], SamplingParams(max_tokens=0))
    assert r.finished and r.tokens == [] and r.finish_reason == "length"
    assert v.n_free == 2  # max_tokens=0 takes no slot
    outs = SpeculativeGenerator(v, _drafter("self", target, None, 2)).generate(
        [[5], [6, 7]], SamplingParams(max_tokens=0)
    )
    assert [o.token_ids for o in outs] == [[], []]
    # a sequence that reaches the cache's capacity finishes with "length", never corrupts
    long = SamplingParams(temperature=0, max_tokens=1000)
    out = SpeculativeGenerator(
        _verify(target), _drafter("random", target, draft_model), k=4
    ).generate([PROMPTS8[-1]], long)[0]
    assert out.finish_reason == "length" and len(PROMPTS8[-1]) + len(out.token_ids) == MAX_LEN
    assert out.token_ids == generate(_verify(target), [PROMPTS8[-1]], long)[0].token_ids


def test_mismatched_tokenizers_are_refused(target, tokenizer):
    other_vocab = DraftEngine.from_model(tiny_model(vocab_size=80), n_slots=1)
    with pytest.raises(IncompatibleDrafter, match="vocab size"):
        SpeculativeGenerator(_verify(target), other_vocab)
    other = word_tokenizer()
    other.tk.add_tokens(["<extra>"])
    with pytest.raises(IncompatibleDrafter, match="tokenizer"):
        SpeculativeGenerator(
            _verify(target, tokenizer=tokenizer), DraftEngine.from_model(target, other, n_slots=1)
        )
    SpeculativeGenerator(
        _verify(target, tokenizer=tokenizer),
        DraftEngine.from_model(target, word_tokenizer(), n_slots=1),
    )


def test_draft_cache_smaller_than_target_degrades_to_plain_decoding(target):
    ref = generate(_verify(target), [PROMPTS8[-1]], GREEDY)[0].token_ids  # prompt of 22
    small = DraftEngine.from_model(target, n_slots=1, max_len=30)  # drafts until it is full
    gen = SpeculativeGenerator(_verify(target), small, k=4)
    assert gen.generate([PROMPTS8[-1]], GREEDY)[0].token_ids == ref
    assert 0 < gen.counters.num_drafts < gen.counters.num_verify_steps  # rounds without a draft
    tiny = DraftEngine.from_model(target, n_slots=1, max_len=8)  # the prompt never fits
    gen = SpeculativeGenerator(_verify(target), tiny, k=4)
    assert gen.generate([PROMPTS8[-1]], GREEDY)[0].token_ids == ref and gen.counters.num_drafts == 0
