import torch

from inference.bench.spec_arithmetic import alpha_from_positions, ideal_speedup
from inference.engine.config import ModelConfig
from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator
from inference.engine.sampling import SamplingParams
from inference.engine.transformer import Transformer
from inference.training.acceptance import AcceptanceStats, greedy_acceptance, replay_rounds


def test_replay_rounds_follows_the_engine_rules():
    s = AcceptanceStats(k=2)
    # token 0 comes from the prefill. Round at 1: accepts 1, 2 -> bonus 3, next 4.
    # Round at 4: rejects 4 -> correction, next 5. Round at 5: k cut to 1 (7 - 5 - 1),
    # accepts 5 -> bonus 6, done.
    replay_rounds([False, True, True, False, False, True, False], 2, s)
    assert (s.rounds, s.drafted, s.accepted, s.emitted, s.rejections) == (3, 5, 3, 6, 1)
    assert s.per_position == [2, 1]
    assert s.mean_acceptance_length == 2.0 and s.acceptance_rate == 3 / 5
    assert abs(s.alpha - 3 / 4) < 1e-9


def test_alpha_estimator_matches_geometric():
    alpha, k, rounds = 0.7, 4, 100000
    acc = [round(rounds * alpha ** (i + 1)) for i in range(k)]
    assert abs(alpha_from_positions(acc, [rounds] * k) - alpha) < 1e-3
    assert alpha_from_positions([], []) == 0.0
    assert abs(ideal_speedup(0.0, 4, 0.0) - 1.0) < 1e-9
    assert abs(ideal_speedup(1.0, 4, 0.0) - 5.0) < 1e-9
    assert abs(ideal_speedup(0.5, 2, 0.25) - 1.75 / 1.5) < 1e-9


def _model(layers):
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        max_position_embeddings=128,
    )
    m = Transformer(cfg).eval()
    with torch.no_grad():  # peaky distributions: no near-ties between the two code paths
        m.lm_head.weight.mul_(30)
    return m


def test_replayed_acceptance_equals_the_engine():
    """Teacher-forced replay gives the engine's own counts (same tokens, same rounds)."""
    target, draft = _model(2), _model(1)
    sd = {k: v for k, v in target.state_dict().items() if not k.startswith("model.layers.1.")}
    draft.load_state_dict(sd)  # the target minus its last layer: partial agreement
    prompts = torch.randint(0, 40, (3, 10), generator=torch.Generator().manual_seed(1))
    k, n = 3, 24
    ours = greedy_acceptance(target, draft, prompts, n, k=k)
    gen = SpeculativeGenerator(
        VerifyEngine(target, n_slots=3, max_len=64),
        DraftEngine.from_model(draft, n_slots=3, max_len=64),
        k=k,
    )
    gen.generate(prompts.tolist(), SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
    c = gen.counters
    assert 0 < ours.acceptance_rate < 1
    assert (ours.rounds, ours.drafted, ours.accepted) == (
        c.num_drafts,
        c.num_draft_tokens,
        c.num_accepted_tokens,
    )
    assert ours.per_position == c.num_accepted_tokens_per_pos


def test_lockstep_generation_equals_the_engine_cache_path():
    from inference.training.acceptance import greedy_generate
    from inference.training.fastgen import lockstep_greedy

    m = _model(2)
    prompts = torch.randint(0, 40, (4, 7), generator=torch.Generator().manual_seed(2))
    assert torch.equal(lockstep_greedy(m, prompts, 20), greedy_generate(m, prompts, 20))
