"""The static-shape step path (bucketed batches, padded rows, key-range buckets), run eagerly
on CPU: the same tokens as the default ``_Step`` path. CUDA adds only capture/replay."""

import pytest
import torch

from inference.engine.engines import DraftEngine, VerifyEngine
from inference.engine.generator import SpeculativeGenerator, generate
from inference.engine.graphs import StaticRunner, next_bucket
from inference.engine.kv_cache import KVCache
from inference.engine.messages import SeqId
from inference.engine.sampling import SamplingParams
from tests.engine.helpers import tiny_model

PROMPTS = [[(5 * i + j) % 60 + 2 for j in range(1 + 4 * i)] for i in range(6)]
GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def test_buckets():
    assert [next_bucket(n) for n in (1, 2, 3, 5, 17, 128)] == [1, 2, 4, 8, 32, 128]
    assert next_bucket(129) is None
    r = StaticRunner(tiny_model(0), KVCache.for_model(tiny_model(0), 6, 100), graphs=False)
    assert r.buckets == (1, 2, 4, 6)
    assert r.shape([0], [10], 1) == (1, 1, 64)
    assert r.shape([2, 5], [70, 3], 5) == (6, 5, 100)  # key range capped at max_len


@torch.no_grad()
def test_static_logits_match_the_step_path_for_any_slots():
    m = tiny_model(0, std=0.3)
    ref_c, c = KVCache.for_model(m, 6, 64), KVCache.for_model(m, 6, 64)
    r = StaticRunner(m, c, graphs=False)
    for cache in (ref_c, c):
        for _ in range(6):
            cache.allocate()
    x = torch.randint(2, 64, (6, 9))
    # prefill all slots with different lengths through the step path on both caches
    n = torch.tensor([3, 9, 1, 6, 2, 8])
    for cache in (ref_c, c):
        m(x, cache, list(range(6)), n)
    # a verify-like step on a sparse, unordered subset with padding
    slots, nv = [4, 1, 3], [3, 1, 2]
    y = torch.randint(2, 64, (3, 3))
    ref = m(y, ref_c, slots, torch.tensor(nv))
    out = r.logits(y, slots, nv)
    for i, k in enumerate(nv):
        assert (out[i, :k] - ref[i, :k]).abs().max() < 1e-4
    assert [c.length(s) for s in range(6)] == [ref_c.length(s) for s in range(6)]
    # then a plain step of all slots: the caches hold the same K/V
    z = torch.randint(2, 64, (6, 1))
    ref = m(z, ref_c, list(range(6)))
    assert (r.logits(z, list(range(6)), [1] * 6) - ref).abs().max() < 1e-4


@pytest.mark.parametrize("k", [0, 1, 3])
def test_engines_on_the_static_path_equal_the_default(k):
    t, d = tiny_model(0, std=0.3), tiny_model(1, std=0.3)

    def run(static):
        v = VerifyEngine(t, n_slots=6, max_len=96, static=static)
        de = DraftEngine.from_model(d, n_slots=6, max_len=96, static=static) if k else None
        return [o.token_ids for o in SpeculativeGenerator(v, de, k=k).generate(PROMPTS, GREEDY)]

    assert run(True) == run(False)


def test_k_changes_and_batch_shrinks_and_grows():
    """k changes every round (new T), sequences of different lengths finish (the batch
    shrinks) and queued ones start in freed slots (it grows)."""
    t, d = tiny_model(0, std=0.3), tiny_model(1, std=0.3)
    prompts = PROMPTS + PROMPTS[:3]
    params = [
        SamplingParams(temperature=0, max_tokens=4 + 5 * (i % 4), ignore_eos=True)
        for i in range(len(prompts))
    ]
    ks: dict[SeqId, int] = {}

    def k_of(sid):
        ks[sid] = ks.get(sid, 0) + 1
        return ks[sid] % 4

    ref = generate(VerifyEngine(t, n_slots=4, max_len=96), prompts, params)
    v = VerifyEngine(t, n_slots=4, max_len=96, static=True)
    gen = SpeculativeGenerator(
        v, DraftEngine.from_model(d, n_slots=4, max_len=96, static=True), k=k_of
    )
    assert [o.token_ids for o in gen.generate(prompts, params)] == [o.token_ids for o in ref]


def test_seeded_sampling_on_the_static_path_is_reproducible():
    t = tiny_model(0, std=0.3)
    params = [SamplingParams(temperature=0.8, top_p=0.9, seed=i, max_tokens=12) for i in range(4)]

    def run(static, prompts, ps):
        v = VerifyEngine(t, n_slots=4, max_len=64, static=static)
        g = SpeculativeGenerator(
            v, DraftEngine.from_model(t, n_slots=4, max_len=64, static=static), k=3
        )
        return [o.token_ids for o in g.generate(prompts, ps)]

    batch = run(True, PROMPTS[:4], params)
    assert batch == run(False, PROMPTS[:4], params)
    assert run(True, [PROMPTS[2]], params[2]) == [batch[2]]
