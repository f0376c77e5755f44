"""The same engine on CUDA (skipped without a GPU): cached vs plain forward in fp32 and bf16,
greedy speculative == plain greedy, seeded batch invariance, JSON wire."""

import pytest
import torch

from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator, generate
from inference.engine.kv_cache import KVCache
from inference.engine.messages import SeqId
from inference.engine.sampling import SamplingParams
from tests.engine.helpers import tiny_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
PROMPTS = [[(5 * i + j) % 60 + 2 for j in range(1 + 4 * i)] for i in range(6)]


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-4), (torch.bfloat16, 6e-2)])
@torch.no_grad()
def test_cached_forward_matches_plain_forward(dtype, atol):
    m = tiny_model(0, std=0.3).to("cuda", dtype)
    x = torch.randint(0, 64, (3, 20), device="cuda")
    ref = m(x).float()
    c = KVCache.for_model(m, 3, 32)
    s = torch.tensor([c.allocate() for _ in range(3)])
    out = m(x[:, :12], c, s, torch.tensor([4, 9, 12])).float()
    assert (out[2] - ref[2, :12]).abs().max() <= atol and out.dtype == torch.float32
    out = m(x[:1, 4:20], c, s[:1]).float()
    assert (out[0] - ref[0, 4:]).abs().max() <= atol


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_speculative_on_cuda(dtype):
    t, d = tiny_model(0, std=0.3).to("cuda", dtype), tiny_model(1, std=0.3).to("cuda", dtype)
    greedy = SamplingParams(temperature=0, max_tokens=20)
    ref = generate(VerifyEngine(t, n_slots=6, max_len=64), PROMPTS, greedy)
    gen = SpeculativeGenerator(
        VerifyEngine(t, n_slots=6, max_len=64),
        DraftEngine.from_model(d, n_slots=6, max_len=64),
        k=3,
    )
    if dtype == torch.float32:  # bf16: batch shapes may flip near-ties, so only fp32 is exact
        assert [o.token_ids for o in gen.generate(PROMPTS, greedy)] == [r.token_ids for r in ref]
    params = [SamplingParams(temperature=0.8, top_p=0.9, seed=i, max_tokens=16) for i in range(6)]

    def make():
        v = VerifyEngine(t, n_slots=6, max_len=64)
        return SpeculativeGenerator(
            v, DraftEngine.from_model(t, n_slots=6, max_len=64), k=3, wire=True
        )

    g = make()
    batch = g.generate(PROMPTS, params)
    assert g.counters.acceptance_rate >= 0.9
    if dtype == torch.float32:
        assert make().generate([PROMPTS[3]], params[3])[0].token_ids == batch[3].token_ids


# -- CUDA graphs ----------------------------------------------------------------------------------

from inference.engine.graphs import BUCKETS, StaticRunner  # noqa: E402


@torch.no_grad()
def test_graph_replay_equals_eager_for_every_bucket():
    m = tiny_model(0, std=0.3).to("cuda")
    caches = [KVCache.for_model(m, 128, 160) for _ in range(2)]
    eager, graphed = (
        StaticRunner(m, c, graphs=g) for c, g in zip(caches, (False, True), strict=True)
    )
    for c in caches:
        for _ in range(128):
            c.allocate()
    for B in BUCKETS:
        for T in (1, 5):
            slots = list(range(B - 1, -1, -1))  # the bucket's top slot, rows in any order
            x = torch.randint(2, 64, (B, T))
            nv = [T - (i % T) for i in range(B)]
            a, b = eager.logits(x, slots, nv), graphed.logits(x, slots, nv)
            for i, n in enumerate(nv):
                assert torch.equal(a[i, :n].argmax(-1), b[i, :n].argmax(-1))
                assert (a[i, :n] - b[i, :n]).abs().max() < 1e-4
    assert {key[0] for key in graphed.captured} == set(BUCKETS)
    assert graphed.replays == 2 * len(BUCKETS) and graphed.capture_s > 0


def _spec(t, d, static, graphs, k, prompts, params, n_slots=6):
    v = VerifyEngine(t, n_slots=n_slots, max_len=96, static=static, graphs=graphs)
    de = (
        DraftEngine.from_model(d, n_slots=n_slots, max_len=96, static=static, graphs=graphs)
        if d is not None
        else None
    )
    g = SpeculativeGenerator(v, de, k=k)
    return [o.token_ids for o in g.generate(prompts, params)], v


def test_graphs_greedy_equal_eager_and_spec_equals_plain_with_k_changes():
    t, d = tiny_model(0, std=0.3).to("cuda"), tiny_model(1, std=0.3).to("cuda")
    greedy = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    plain, _ = _spec(t, None, False, False, 0, PROMPTS, greedy)
    ks: dict[SeqId, int] = {}

    def k_of(sid):  # k changes every round: 0..4
        ks[sid] = ks.get(sid, 0) + 1
        return ks[sid] % 5

    for k in (0, 3, k_of):
        out, v = _spec(t, d, True, True, k, PROMPTS, greedy)
        assert out == plain, k
        assert v.runner.replays > 0
    assert {key[1] for key in v.runner.captured} >= {1, 2, 3, 4, 5}


def test_graphs_seeded_sampling_is_reproducible():
    t = tiny_model(0, std=0.3).to("cuda")
    params = [SamplingParams(temperature=0.8, top_p=0.9, seed=i, max_tokens=16) for i in range(6)]
    a, _ = _spec(t, t, True, True, 3, PROMPTS, params)
    b, _ = _spec(t, t, True, True, 3, PROMPTS, params)
    eager, _ = _spec(t, t, True, False, 3, PROMPTS, params)
    assert a == b == eager


def test_graphs_batch_shrinks_and_grows_replays_the_right_bucket():
    t, d = tiny_model(0, std=0.3).to("cuda"), tiny_model(1, std=0.3).to("cuda")
    prompts = PROMPTS + PROMPTS[:4]
    params = [
        SamplingParams(temperature=0, max_tokens=3 + 6 * (i % 3), ignore_eos=True)
        for i in range(len(prompts))
    ]
    ref, _ = _spec(t, d, False, False, 2, prompts, params, n_slots=5)
    out, v = _spec(t, d, True, True, 2, prompts, params, n_slots=5)
    assert out == ref
    assert len({key[0] for key in v.runner.captured}) >= 2  # it replayed several buckets


def test_one_copy_of_every_weight_on_cuda(tmp_path):
    from inference.engine.checkpoints import load_checkpoint, save_checkpoint
    from inference.engine.memory import weights_memory

    src = tiny_model(
        0,
        vocab_size=1024,
        hidden_size=256,
        intermediate_size=1024,
        num_attention_heads=8,
        num_key_value_heads=2,
    )
    save_checkpoint(src, None, tmp_path)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    model, _ = load_checkpoint(tmp_path, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    loaded = torch.cuda.memory_allocated() - before
    with torch.no_grad():
        model(torch.tensor([[3, 4, 5]], device="cuda"))  # builds every fused weight
    mem = weights_memory(model)
    assert loaded <= 1.05 * mem["checkpoint_bytes"], (loaded, mem)
    assert mem["ratio_with_copies"] <= 1.05, mem
