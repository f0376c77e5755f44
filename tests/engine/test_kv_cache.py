import pytest
import torch

from inference.engine.kv_cache import CacheError, CacheFull, CacheOverflow, KVCache
from tests.engine.helpers import tiny_model


def test_allocate_free_reuse_and_full():
    c = KVCache(1, 2, 8, 1, 4)
    a, b = c.allocate(), c.allocate()
    with pytest.raises(CacheFull):
        c.allocate()
    c.free(a)
    assert c.allocate() == a and c.length(a) == 0
    with pytest.raises(CacheError):
        c.free(5)
    c.free(b)
    with pytest.raises(CacheError):  # double free
        c.free(b)


@torch.no_grad()
def test_overflow_is_raised_before_anything_is_written():
    m = tiny_model()
    c = KVCache.for_model(m, 2, 8)
    s = torch.tensor([c.allocate(), c.allocate()])
    m(torch.ones(2, 6, dtype=torch.long), c, s, torch.tensor([6, 2]))
    before = [t.clone() for t in c.k + c.v]
    with pytest.raises(CacheOverflow, match="exceed max_len 8"):
        m(torch.ones(2, 3, dtype=torch.long), c, s)  # slot 0: 6 + 3 > 8
    assert c.lengths[s].tolist() == [6, 2]
    assert all(torch.equal(x, y) for x, y in zip(before, c.k + c.v, strict=True))
    m(torch.ones(2, 2, dtype=torch.long), c, s)  # still usable: 8 and 4
    assert c.lengths[s].tolist() == [8, 4]


@torch.no_grad()
def test_rollback_then_overwrite_matches_fresh_forward():
    m = tiny_model()
    x = torch.randint(0, 64, (1, 12))
    ref = m(x)
    c = KVCache.for_model(m, 1, 16)
    s = torch.tensor([c.allocate()])
    m(torch.randint(0, 64, (1, 12)), c, s)  # garbage, then roll it back
    c.rollback(0, 0)
    with pytest.raises(CacheError):
        c.rollback(0, 3)  # cannot grow by rollback
    assert torch.allclose(m(x, c, s), ref, atol=1e-5)
    c.rollback(0, 7)
    assert torch.allclose(m(x[:, 7:], c, s), ref[:, 7:], atol=1e-5)


@pytest.mark.parametrize(
    "slots",
    [
        [0, 1, 2, 3, 4],  # consecutive: a view
        [3, 0, 4, 1, 2],  # a permutation of a range: spread queries
        [0, 1, 2, 3, 5],  # a range with one hole: spread queries
        [0, 9, 4, 7, 2],  # sparse: gathered
    ],
)
@torch.no_grad()
def test_cached_rows_in_any_slots_match_the_plain_forward(slots):
    m = tiny_model(0, std=0.3)
    x = torch.randint(0, 64, (5, 14))
    ref = m(x)
    c = KVCache.for_model(m, 10, 16)
    for _ in range(10):
        c.allocate()
    n = [9, 3, 9, 6, 1]  # padded rows: each fills its slot to a different length
    m(x[:, :9], c, slots, n)
    # every row continues from its own length (right-padded, so padding writes the scratch)
    rest = [x[i, n[i] : 14].tolist() for i in range(5)]
    width = max(map(len, rest))
    xs = torch.tensor([r + [0] * (width - len(r)) for r in rest])
    out = m(xs, c, slots, [len(r) for r in rest])
    for i in range(5):
        got = out[i, : len(rest[i])]
        assert (got - ref[i, n[i] :]).abs().max() < 1e-4, (slots, i)
    assert [c.length(s) for s in slots] == [14] * 5
