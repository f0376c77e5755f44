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

from collections.abc import Sequence

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


def adjacent(tensors: Sequence[Tensor]) -> bool:
    """True when the tensors are contiguous, back to back in one storage (in this order):
    then their concatenation along dim 0 is a view, not a copy."""
    t0 = tensors[0]
    if not all(
        t.is_contiguous()
        and t.dtype == t0.dtype
        and t.device == t0.device
        and t.shape[1:] == t0.shape[1:]
        for t in tensors
    ):
        return False
    if t0.device.type == "meta":
        return False
    base = t0.untyped_storage().data_ptr()
    end = t0.data_ptr()
    for t in tensors:
        if t.untyped_storage().data_ptr() != base or t.data_ptr() != end:
            return False
        end += t.numel() * t.element_size()
    return True


def joined(tensors: Sequence[Tensor]) -> Tensor:
    """``cat(tensors)`` (detached): a view when they are ``adjacent``, else a copy."""
    if len(tensors) == 1:
        return tensors[0].detach()
    if adjacent(tensors):
        t0 = tensors[0].detach()
        shape = (sum(t.shape[0] for t in tensors), *t0.shape[1:])
        return t0.as_strided(shape, torch.empty(shape, device="meta").stride())
    return torch.cat([t.detach() for t in tensors]).contiguous()


class FusedLinear:
    """``x -> cat([layer(x) for layer in layers], -1)`` as one matmul, for inference.

    ``share_storage_`` moves the layers' weights (and biases) into one buffer, each parameter
    becoming a view of its rows, so the fused weight is a view too: one copy of every weight.
    """

    # derived from the layers' parameters by ``_build`` (on the first call, and when they change)
    weight: Tensor
    bias: Tensor | None
    packable: bool
    _packed: Tensor | None
    _wt: Tensor | None

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
        if (
            x.device.type == "cpu"
            and x.dtype == self.weight.dtype
            and not torch.is_autocast_enabled("cpu")
        ):
            one_row = x.numel() == x.shape[-1]
            if self.packable and (not one_row or self.weight.numel() >= PACK_MIN_NUMEL_ONE_ROW):
                if self._packed is None:
                    self._packed = _pack(self.weight)
                    self.packable = self._packed is not None
                if self._packed is not None:
                    return torch.ops.mkldnn._linear_pointwise(
                        x, self._packed, self.bias, "none", [], ""
                    )
            if one_row and self.weight.dtype == torch.float32:
                if self._wt is None:
                    self._wt = self.weight.t().contiguous()
                y = torch.matmul(x, self._wt)
                return y if self.bias is None else y.add_(self.bias)
        return F.linear(x, self.weight, self.bias)

    @torch.no_grad()
    def share_storage_(self) -> None:
        """Re-home the layers' weights (and biases, when all have one) into one buffer per
        kind, the parameters becoming views of it (same Parameter objects, so an optimizer
        keeps working). Idempotent; a no-op on the meta device."""
        if len(self.layers) == 1:
            return
        for name in ("weight", "bias"):
            ts = [getattr(m, name) for m in self.layers]
            if any(t is None for t in ts) or ts[0].device.type == "meta" or adjacent(ts):
                continue
            # the same kind of tensor (inference tensors, made under inference_mode, or not)
            with torch.inference_mode(ts[0].is_inference()):
                flat = torch.cat([t.detach() for t in ts])
                row = 0
                for t in ts:
                    t.data = flat[row : row + t.shape[0]]
                    row += t.shape[0]
        self._key = None

    def _build(self, key: tuple) -> None:
        # normal tensors, not inference tensors, even when built under inference_mode
        with torch.inference_mode(False), torch.no_grad():
            self.weight = joined([m.weight for m in self.layers])
            biases = [m.bias for m in self.layers]
            if all(b is None for b in biases):
                self.bias = None
            elif all(b is not None for b in biases):
                self.bias = joined(biases)
            else:
                self.bias = torch.cat(
                    [
                        b if b is not None else m.weight.new_zeros(m.out_features)
                        for m, b in zip(self.layers, biases, strict=True)
                    ]
                ).detach()
        self.packable = self.weight.numel() >= PACK_MIN_NUMEL
        self._wt = self._packed = None  # built on first use: most models need one of the two
        self._key = key
