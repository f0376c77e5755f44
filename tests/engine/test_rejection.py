"""The rejection sampler's output distribution equals the target's, with millions of
draws at once (randomness is an input of the pure function)."""

import pytest
import torch

from inference.engine.rejection import rejection_sample

N, V = 200_000, 8


def _run(p, q, k, greedy=False, one_hot=False, seed=0):
    """p [k+1, V], q [k, V] context-independent; drafts ~ q. Returns (n_acc, outputs)."""
    g = torch.Generator().manual_seed(seed)
    d = torch.multinomial(q, N, replacement=True, generator=g).T  # [N, k]
    tp = p.expand(N, k + 1, V)
    dp = None if one_hot else q.expand(N, k, V)
    n_acc, nxt = rejection_sample(
        tp,
        d,
        torch.full((N,), k),
        dp,
        torch.full((N,), greedy),
        torch.rand(N, k, generator=g),
        torch.empty(N, V).exponential_(generator=g),
    )
    return n_acc, torch.cat([d, torch.zeros(N, 1, dtype=torch.long)], 1).scatter(
        1, n_acc[:, None], nxt[:, None]
    )


def _dists(k, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(k + 1, V, generator=g) * 2.5, -1)
    q = torch.softmax(torch.randn(k, V, generator=g) * 1.5, -1)
    return p, q


@pytest.mark.parametrize("k", [1, 2, 3])
def test_output_distribution_equals_target(k):
    p, q = _dists(k, seed=k)
    n_acc, out = _run(p, q, k)
    for j in range(k + 1):  # token j is emitted when the first j drafts were accepted
        reach = n_acc >= j
        emp = torch.bincount(out[reach, j], minlength=V) / reach.sum()
        assert 0.5 * (emp - p[j]).abs().sum() < 0.01, j
    # acceptance of the first position is sum(min(p, q))
    expected = torch.minimum(p[0], q[0]).sum()
    assert abs((n_acc >= 1).float().mean() - expected) < 0.005


@pytest.mark.parametrize("k", [1, 3])
def test_one_hot_drafts_ngram_style(k):
    p, _ = _dists(k, seed=10 + k)
    q = torch.zeros(k, V)
    top = p[:k].argmax(-1)
    q[torch.arange(k), top] = 1.0  # a deterministic draft: the likeliest tokens
    n_acc, out = _run(p, q, k, one_hot=True)
    for j in range(k + 1):
        reach = n_acc >= j
        assert reach.sum() > 20_000
        emp = torch.bincount(out[reach, j], minlength=V) / reach.sum()
        assert 0.5 * (emp - p[j]).abs().sum() < 0.01
    assert abs((n_acc >= 1).float().mean() - p[0, top[0]]) < 0.005


def test_greedy_rows_exact_match_and_padding():
    p = torch.softmax(torch.randn(3, 4, V), -1)
    am = p.argmax(-1)
    d = am[:, :3].clone()
    d[1, 1] = (d[1, 1] + 1) % V  # row 1 mismatches at position 1
    n_draft = torch.tensor([3, 3, 1])  # row 2: one real draft token, then padding
    d[2, 1:] = 0
    n_acc, nxt = rejection_sample(
        p, d, n_draft, None, torch.ones(3, dtype=torch.bool), torch.zeros(3, 3), torch.ones(3, V)
    )
    assert n_acc.tolist() == [3, 1, 1]
    assert nxt.tolist() == [am[0, 3].item(), am[1, 1].item(), am[2, 1].item()]


def test_empty_drafts_are_plain_sampling():
    p = torch.softmax(torch.randn(V), -1)
    g = torch.Generator().manual_seed(0)
    n_acc, nxt = rejection_sample(
        p.expand(N, 1, V),
        torch.zeros(N, 0, dtype=torch.long),
        torch.zeros(N, dtype=torch.long),
        None,
        torch.zeros(N, dtype=torch.bool),
        torch.zeros(N, 0),
        torch.empty(N, V).exponential_(generator=g),
    )
    assert n_acc.sum() == 0
    assert 0.5 * (torch.bincount(nxt, minlength=V) / N - p).abs().sum() < 0.01
