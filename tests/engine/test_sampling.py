import torch

from inference.engine.counters import SpecCounters
from inference.engine.messages import Draft, VerifyResult, draft_q, to_wire
from inference.engine.sampling import SamplingParams, logits_to_probs, make_generator, sample


def test_temperature_top_k_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.1]]))
    probs = lambda **kw: logits_to_probs(logits, [SamplingParams(**kw)])[0]  # noqa: E731
    assert torch.allclose(probs(), torch.tensor([0.5, 0.25, 0.15, 0.1]))
    assert probs(temperature=0).tolist() == [1, 0, 0, 0]
    assert torch.allclose(probs(top_k=2), torch.tensor([2 / 3, 1 / 3, 0, 0]))
    assert torch.allclose(probs(top_p=0.7), torch.tensor([2 / 3, 1 / 3, 0, 0]))  # 0.5+0.25 >= 0.7
    assert torch.allclose(probs(top_p=0.5), torch.tensor([1.0, 0, 0, 0]))
    hot = probs(temperature=0.5)
    assert torch.allclose(hot, torch.tensor([0.25, 0.0625, 0.0225, 0.01]) / 0.345)
    # per-row parameters in one call, with a position dimension
    two = logits_to_probs(logits.expand(2, 3, 4), [SamplingParams(top_k=1), SamplingParams()])
    assert two[0, 2].tolist() == [1, 0, 0, 0] and torch.allclose(two[1, 1], probs())


def test_seeded_sampling_is_exact_and_reproducible():
    p = torch.tensor([0.5, 0.3, 0.2])
    params = [SamplingParams(seed=1)] * 20000
    gens = [make_generator(i) for i in range(20000)]
    toks = sample(p.expand(20000, 3), params, gens)
    assert (torch.bincount(toks, minlength=3) / 20000 - p).abs().max() < 0.01
    again = sample(p.expand(3, 3), params[:3], [make_generator(i) for i in range(3)])
    assert again.tolist() == toks[:3].tolist()


def test_messages_json_roundtrip():
    q = to_wire(torch.softmax(torch.randn(3, 10), -1))
    d = Draft.from_json(Draft("s1", [1, 2, 3], q).to_json())
    assert d.tokens == [1, 2, 3] and d.probs is not None and torch.equal(d.probs, q)
    assert torch.allclose(draft_q(q).sum(-1), torch.ones(3))
    assert Draft.from_json(Draft(7, []).to_json()).probs is None
    r = VerifyResult("s", [4, 5], 1, 2, True, "stop", "\n")
    assert VerifyResult.from_json(r.to_json()) == r


def test_counters_merge_and_dict():
    a, b = SpecCounters(), SpecCounters()
    a.record_round(3, 2, 3)
    a.record_verify_step(0.5, 4)
    b.record_round(4, 4, 5)
    b.record_round(0, 0, 1)
    b.record_verify_step(0.25, 4)
    b.record_draft_step(0.1, 4)
    a.merge(b)
    assert (a.num_drafts, a.num_draft_tokens, a.num_accepted_tokens) == (2, 7, 6)
    assert a.num_accepted_tokens_per_pos == [2, 2, 1, 1]
    assert a.num_draft_tokens_per_pos == [2, 2, 2, 1]
    assert a.num_emitted_tokens == 9 and a.verify_batch_sizes == {4: 2}
    assert a.mean_acceptance_length == 4.0 and abs(a.acceptance_rate - 6 / 7) < 1e-9
    assert a.acceptance_rate_per_pos == [1.0, 1.0, 0.5, 1.0]
    b.record_round(2, 0, 1)
    assert b.acceptance_rate_per_pos == [0.5, 0.5, 1.0, 1.0]
    d = a.to_dict()
    assert d["verify_batch_sizes"] == {"4": 2} and d["verify_time_s"] == 0.75
    assert SpecCounters.from_dict(d).to_dict() == d
