"""A draft with a reduced-vocabulary head (FR-Spec): exact under rejection sampling (its q is
scattered into the full vocabulary, zero elsewhere), greedy output equal to plain decoding,
and checkpoints that keep the head's token ids."""

import pytest
import torch

from inference.engine.checkpoints import load_checkpoint, save_checkpoint
from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator, generate
from inference.engine.messages import draft_q
from inference.engine.sampling import SamplingParams
from inference.training.self_draft import self_draft
from tests.engine.helpers import tiny_model

GREEDY = SamplingParams(temperature=0, max_tokens=24)
PROMPTS = [[(3 * i + j) % 60 + 2 for j in range(1 + 3 * i)] for i in range(8)]


def test_greedy_with_a_reduced_draft_equals_plain_decoding():
    target = tiny_model(0, std=0.3, num_hidden_layers=3)
    ids = torch.arange(0, 64, 2)  # half the vocabulary: every odd token is always rejected
    draft = self_draft(target, 1, ids)
    ref = generate(VerifyEngine(target, max_len=64), PROMPTS, GREEDY)
    gen = SpeculativeGenerator(
        VerifyEngine(target, max_len=64), DraftEngine.from_model(draft, max_len=64), k=3
    )
    outs = gen.generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in outs] == [r.token_ids for r in ref]
    assert gen.counters.num_draft_tokens > 0


def test_reduced_draft_tokens_and_q_stay_in_its_vocabulary():
    target = tiny_model(0, std=0.3)
    ids = torch.tensor([2, 3, 5, 7, 11, 13, 17, 19])
    engine = DraftEngine.from_model(self_draft(target, 2, ids), max_len=64)
    engine.add("s", [4, 6, 8], SamplingParams(temperature=1.0, seed=1))
    (d,) = engine.propose([("s", 4)])
    assert set(d.tokens) <= set(ids.tolist())
    assert d.probs is not None
    q = draft_q(d.probs)
    assert q.shape == (4, 64)
    outside = torch.ones(64, dtype=torch.bool)
    outside[ids] = False
    assert q[:, outside].sum() == 0 and torch.allclose(q.sum(-1), torch.ones(4))


def test_a_self_draft_with_every_layer_and_the_whole_vocabulary_is_the_target():
    target = tiny_model(0, std=0.3)
    draft = self_draft(target, target.config.num_hidden_layers, torch.arange(64))
    x = torch.tensor([PROMPTS[3]])
    with torch.no_grad():
        assert torch.allclose(draft(x), target(x), atol=1e-5)


def test_reduced_head_checkpoint_round_trip(tmp_path):
    draft = self_draft(tiny_model(0, std=0.3), 1, torch.tensor([1, 4, 9, 16, 25]))
    save_checkpoint(draft, None, tmp_path / "d")
    loaded, _ = load_checkpoint(tmp_path / "d")
    assert loaded.config.draft_vocab_size == 5
    ids = loaded.vocab_ids
    assert isinstance(ids, torch.Tensor) and ids.dtype == torch.long
    assert ids.tolist() == [1, 4, 9, 16, 25]
    x = torch.tensor([PROMPTS[2]])
    with torch.no_grad():
        assert torch.allclose(loaded(x), draft(x))


@pytest.mark.slow  # ~10-30 s on 2 shared cores: 20k sequences through the engines
@torch.no_grad()
@pytest.mark.parametrize("k", [1, 2])
def test_sampled_distribution_with_a_reduced_draft_equals_target(k):
    """As test_speculative's TV test: tokens 2 and 3 over N seeds; the draft knows only 5 of
    the 8 tokens (not the target's likeliest first token), so its q is zero on the others."""
    V, N = 8, 20_000  # TV sampling noise at this N is ~0.005
    target = tiny_model(0, vocab_size=V, std=0.5)
    prompt = [3, 5]
    p1 = target(torch.tensor([prompt])).softmax(-1)[0, -1]
    keep = [t for t in range(V) if t != int(p1.argmax())][:5]
    draft = self_draft(tiny_model(1, vocab_size=V, std=0.5), 2, torch.tensor(keep))
    params = [SamplingParams(temperature=1.0, seed=s, max_tokens=2 + k) for s in range(N)]
    gen = SpeculativeGenerator(
        VerifyEngine(target, n_slots=N, max_len=24),
        DraftEngine.from_model(draft, n_slots=N, max_len=24),
        k=k,
    )
    outs = gen.generate([prompt] * N, params)
    toks = torch.tensor([o.token_ids[:3] for o in outs])
    ctx1 = torch.tensor([prompt + [a] for a in range(V)])
    p2 = target(ctx1).softmax(-1)[:, -1]  # [V, V]: p(t2 | t1)
    ctx2 = torch.tensor([prompt + [a, b] for a in range(V) for b in range(V)])
    p3 = target(ctx2).softmax(-1)[:, -1].view(V, V, V)
    joint12 = p1[:, None] * p2
    m1, m2, m3 = p1, joint12.sum(0), (joint12[..., None] * p3).sum((0, 1))
    for j, m in ((0, m1), (1, m2), (2, m3)):
        emp = torch.bincount(toks[:, j], minlength=V) / N
        assert 0.5 * (emp - m).abs().sum() < 0.01, j
    assert gen.counters.num_draft_tokens >= N * k and gen.counters.num_accepted_tokens > N // 10
