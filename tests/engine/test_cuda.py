"""The same engine on CUDA (skipped without a GPU): cached vs plain forward in fp32 and bf16,
greedy speculative == plain greedy, seeded batch invariance, JSON wire."""

import pytest
import torch

from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator, generate
from inference.engine.kv_cache import KVCache
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
    gen = SpeculativeGenerator(VerifyEngine(t, n_slots=6, max_len=64), DraftEngine.from_model(d, n_slots=6, max_len=64), k=3)  # fmt: skip
    if dtype == torch.float32:  # bf16: batch shapes may flip near-ties, so only fp32 is exact
        assert [o.token_ids for o in gen.generate(PROMPTS, greedy)] == [r.token_ids for r in ref]
    params = [SamplingParams(temperature=0.8, top_p=0.9, seed=i, max_tokens=16) for i in range(6)]

    def make():
        v = VerifyEngine(t, n_slots=6, max_len=64)
        return SpeculativeGenerator(v, DraftEngine.from_model(t, n_slots=6, max_len=64), k=3, wire=True)  # fmt: skip

    g = make()
    batch = g.generate(PROMPTS, params)
    assert g.counters.acceptance_rate >= 0.9
    if dtype == torch.float32:
        assert make().generate([PROMPTS[3]], params[3])[0].token_ids == batch[3].token_ids
