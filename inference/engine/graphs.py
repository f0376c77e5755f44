"""Decoding steps with static shapes: plain decode (T=1), verify of k+1 tokens (T=k+1) and
draft steps, run per batch-size bucket, replayed as CUDA graphs on a GPU.

A step with batch rows in slots ``slots`` runs as the ``_StaticStep`` forward of bucket B =
the smallest bucket holding slot ``max(slots)`` (row i is slot i: slots are handed out lowest
first, so a batch of n sequences mostly fills bucket n), T new tokens per row, and a key range
``n_keys`` (a power of two covering the longest sequence, so attention reads what is there
rather than the whole cache). Rows of slots outside the batch carry no valid token: their
writes go to the scratch slot and their outputs are dropped.

The same static path runs eagerly on any device (``graphs=False``), which is how it is tested
on a CPU; on CUDA each (B, T, n_keys) is captured once, lazily on first use (the first step of
a new shape is eager and times the capture into ``capture_s``), or ahead with ``capture``.
Host work per step: three small host-to-device copies into the static inputs, one replay and
one gather of the batch's rows.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .kv_cache import KVCache
from .transformer import Transformer

if TYPE_CHECKING:
    from torch.cuda import _POOL_HANDLE

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
MIN_KEYS = 64


def next_bucket(n: int, buckets: tuple[int, ...] = BUCKETS) -> int | None:
    return next((b for b in buckets if b >= n), None)


class _Graph:
    def __init__(self, graph, tokens: Tensor, start: Tensor, n_valid: Tensor, out: Tensor):
        self.graph, self.tokens, self.start, self.n_valid, self.out = (
            graph,
            tokens,
            start,
            n_valid,
            out,
        )


class StaticRunner:
    """Cached forwards of a model on a cache, by bucket; ``graphs`` (default: on CUDA)
    replays captured CUDA graphs, else the static path runs eagerly."""

    def __init__(
        self,
        model: Transformer,
        cache: KVCache,
        *,
        graphs: bool | None = None,
        buckets: tuple[int, ...] = BUCKETS,
    ) -> None:
        self.model, self.cache = model, cache
        self.device = cache.k[0].device
        self.graphs = (self.device.type == "cuda") if graphs is None else graphs
        if self.graphs and self.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self.buckets = tuple(b for b in buckets if b <= cache.n_slots) or (cache.n_slots,)
        if self.buckets[-1] < cache.n_slots:
            self.buckets += (cache.n_slots,)
        self._graphs: dict[tuple[int, int, int], _Graph] = {}
        self._bufs: dict[tuple[int, int], tuple[Tensor, Tensor, Tensor, Tensor]] = {}
        self._pool: _POOL_HANDLE | None = None
        self.capture_s = 0.0
        self.replays = 0

    def n_keys(self, end: int) -> int:
        """Key range for a longest sequence end ``end``: a power of two, within the cache."""
        n = MIN_KEYS
        while n < end:
            n *= 2
        return min(n, self.cache.max_len)

    def shape(self, slots: list[int], start: list[int], T: int) -> tuple[int, int, int]:
        return self._bucket(max(slots) + 1), T, self.n_keys(max(start) + T)

    def _bucket(self, n: int) -> int:
        """The smallest bucket of ``n`` rows (the last bucket is the cache's slot count)."""
        b = next_bucket(n, self.buckets)
        if b is None:
            raise ValueError(f"{n} rows exceed the cache's {self.cache.n_slots} slots")
        return b

    @property
    def captured(self) -> list[tuple[int, int, int]]:
        return sorted(self._graphs)

    @torch.no_grad()
    def logits(self, x: Tensor, slots: list[int], n_valid: list[int]) -> Tensor:
        """Logits [len(slots), T, V] for host tokens ``x`` [len(slots), T] appended to
        ``slots`` (``n_valid[i]`` real tokens in row i); advances the cache lengths."""
        T = x.shape[1]
        start = self.cache.reserve(slots, n_valid)  # raises CacheOverflow before any write
        key = self.shape(slots, start, T)
        B = key[0]
        tok = torch.zeros(B, T, dtype=torch.long)
        st = torch.zeros(B, dtype=torch.long)
        nv = torch.zeros(B, dtype=torch.long)
        idx = torch.tensor(slots)
        tok[idx], st[idx], nv[idx] = x.to(torch.long), torch.tensor(start), torch.tensor(n_valid)
        if self.graphs:
            g = self._graphs.get(key)
            if g is None:
                g = self._capture(key)
            g.tokens.copy_(tok, non_blocking=True)
            g.start.copy_(st, non_blocking=True)
            g.n_valid.copy_(nv, non_blocking=True)
            g.graph.replay()
            self.replays += 1
            out = g.out
        else:
            dev = self.device
            out = self.model.static_logits(tok.to(dev), self.cache, st.to(dev), nv.to(dev), key[2])
        self.cache.advance(slots, n_valid)
        rows = idx.to(self.device)
        return out[rows] if slots != list(range(len(slots))) else out[: len(slots)].clone()

    @torch.no_grad()
    def capture(self, batches: list[int], ts: list[int], ends: list[int]) -> float:
        """Capture ahead the graphs of these batch sizes, token counts and sequence ends;
        returns the seconds spent."""
        t0 = self.capture_s
        for b in batches:
            for t in ts:
                for e in ends:
                    key = (self._bucket(b), t, self.n_keys(e))
                    if key not in self._graphs:
                        self._capture(key)
        return self.capture_s - t0

    def _buffers(self, B: int, T: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Static inputs and output, shared by the graphs of every key range of (B, T): only
        one runs at a time, and the vocabulary-wide output is the largest tensor of a step."""
        bufs = self._bufs.get((B, T))
        if bufs is None:
            dev = self.device
            w = self.model.lm_head.weight
            bufs = self._bufs[(B, T)] = (
                torch.zeros(B, T, dtype=torch.long, device=dev),
                torch.zeros(B, dtype=torch.long, device=dev),
                torch.zeros(B, dtype=torch.long, device=dev),
                torch.empty(B, T, w.shape[0], dtype=w.dtype, device=dev),
            )
        return bufs

    def _capture(self, key: tuple[int, int, int]) -> _Graph:
        B, T, n_keys = key
        t0 = time.perf_counter()
        dev = self.device
        tok, st, nv, out = self._buffers(B, T)
        tok.zero_(), st.zero_(), nv.zero_()  # 0 valid tokens: warm-up writes go to scratch
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            for _ in range(2):  # builds fused weights, rope tables, cuBLAS workspaces
                self.model.static_logits(tok, self.cache, st, nv, n_keys)
        torch.cuda.current_stream(dev).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            out.copy_(self.model.static_logits(tok, self.cache, st, nv, n_keys))
        torch.cuda.synchronize(dev)
        g = self._graphs[key] = _Graph(graph, tok, st, nv, out)
        self.capture_s += time.perf_counter() - t0
        return g


def make_runner(model: Transformer, cache: KVCache, static: bool | None, graphs: bool | None):
    """The engines' choice: the static path (graphed) by default on CUDA only; on a CPU the
    ``_Step`` path, tuned for it, stays the default."""
    if static is None:
        static = cache.k[0].device.type == "cuda"
    return StaticRunner(model, cache, graphs=graphs) if static else None
