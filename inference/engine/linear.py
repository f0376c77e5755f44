"""Inference matmuls: several ``nn.Linear`` that read the same input run as ONE matmul
(q/k/v, gate/up), and on CPU each call takes the kernel that is fastest for its shape.

Why (measured on an AVX-512 CPU, 1 thread, the demo target's matrices): at decoding's small
batches an fp32 ``F.linear`` is a poor GEMM. Five rows cost 1.6x one row, while a oneDNN
pre-packed weight does 1 and 5 rows in about the same time, faster than ``F.linear`` does
one; that flat cost is what speculative decoding needs, since verifying k+1 tokens should
cost what one token costs (inductor's freezing pass and IPEX pack weights the same way). A
packed call has ~12 us of fixed cost, so small matrices (draft models) are not packed; a
single fp32 row through them is fastest as ``x @ W.T`` with ``W.T`` stored contiguous.

The derived weights come from the layers' own parameters and are rebuilt when any of them
changes (a new tensor, or an in-place update that bumps ``_version``), so training,
``load_state_dict`` and ``.to()`` never leave them stale. With autograd or autocast on (training,
evaluation under autocast) the plain ``F.linear`` runs, so autocast still casts its inputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _pack(weight: Tensor) -> Tensor | None:
    """oneDNN-packed weight for ``_linear_pointwise``, or None where that path is absent."""
    if weight.device.type != "cpu" or weight.dtype not in (torch.float32, torch.bfloat16):
        return None
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight)
        probe = torch.zeros(1, weight.shape[1], dtype=weight.dtype)
        torch.ops.mkldnn._linear_pointwise(probe, packed, None, "none", [], "")
    except (RuntimeError, AttributeError, NotImplementedError):  # a build without oneDNN ops
        return None
    return packed


def stamp(t: Tensor) -> tuple[int, int]:
    """Changes when ``t`` is replaced or updated in place (inference tensors, made under
    ``inference_mode``, cannot be updated in place and have no version counter)."""
    return t.data_ptr(), 0 if t.is_inference() else t._version


# Below these sizes a packed call's fixed cost outweighs its gain. One row is a GEMV, which
# ``x @ W.T`` does well while the weights stay in cache; larger models stream them from memory.
PACK_MIN_NUMEL = 1 << 16
PACK_MIN_NUMEL_ONE_ROW = 1 << 17


class FusedLinear:
    """``x -> cat([layer(x) for layer in layers], -1)`` as one matmul, for inference."""

    def __init__(self, layers: list[nn.Linear]) -> None:
        self.layers = layers  # a plain list: not submodules, so the state dict is unchanged
        self._key: tuple | None = None

    def __call__(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled():  # training: differentiable, unfused
            return torch.cat([m(x) for m in self.layers], dim=-1)
        # parameters are looked up each call: load_state_dict(assign=True) replaces them
        key = tuple(stamp(w) for m in self.layers for w in (m.weight, m.bias) if w is not None)
        if key != self._key:
            self._build(key)
        if x.device.type == "cpu" and x.dtype == self.weight.dtype and not torch.is_autocast_enabled("cpu"):  # fmt: skip
            one_row = x.numel() == x.shape[-1]
            if self.packable and (not one_row or self.weight.numel() >= PACK_MIN_NUMEL_ONE_ROW):
                if self._packed is None:
                    self._packed = _pack(self.weight)
                    self.packable = self._packed is not None
                if self._packed is not None:
                    return torch.ops.mkldnn._linear_pointwise(x, self._packed, self.bias, "none", [], "")  # fmt: skip
            if one_row and self.weight.dtype == torch.float32:
                if self._wt is None:
                    self._wt = self.weight.t().contiguous()
                y = torch.matmul(x, self._wt)
                return y if self.bias is None else y.add_(self.bias)
        return F.linear(x, self.weight, self.bias)

    def _build(self, key: tuple) -> None:
        # normal tensors, not inference tensors, even when built under inference_mode
        with torch.inference_mode(False), torch.no_grad():
            ws = [m.weight for m in self.layers]
            self.weight = ws[0].detach() if len(ws) == 1 else torch.cat(ws).contiguous()
            biases = [m.bias for m in self.layers]
            if all(b is None for b in biases):
                self.bias = None
            else:
                self.bias = torch.cat([
                    b if b is not None else m.weight.new_zeros(m.out_features)
                    for m, b in zip(self.layers, biases, strict=True)
                ]).detach()  # fmt: skip
        self.packable = self.weight.numel() >= PACK_MIN_NUMEL
        self._wt = self._packed = None  # built on first use: most models need one of the two
        self._key = key
