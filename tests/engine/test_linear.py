"""FusedLinear: one matmul for several nn.Linear, with derived (fused, transposed, packed)
weights that must never go stale."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from inference.engine.linear import PACK_MIN_NUMEL_ONE_ROW, FusedLinear
from tests.engine.helpers import tiny_model


def _layers(bias: bool, dtype=torch.float32):
    torch.manual_seed(0)
    # big enough that the packed path is taken for every row count
    n_in = 512
    n_out = PACK_MIN_NUMEL_ONE_ROW // n_in + 1
    return [nn.Linear(n_in, n, bias=bias).to(dtype) for n in (n_out, n_out // 2)] + [
        nn.Linear(n_in, 16, bias=bias).to(dtype)
    ]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 5, 33])
@torch.no_grad()
def test_fused_equals_separate_layers(bias, rows):
    layers = _layers(bias)
    fused = FusedLinear(layers)
    x = torch.randn(1, rows, 512)
    ref = torch.cat([m(x) for m in layers], dim=-1)
    assert (fused(x) - ref).abs().max() < 1e-4
    small = FusedLinear([layers[2]])  # small: the one-row transposed path, or F.linear
    assert (small(x) - layers[2](x)).abs().max() < 1e-5


@torch.no_grad()
def test_bf16_matches_linear():
    layers = _layers(True, torch.bfloat16)
    x = torch.randn(2, 3, 512, dtype=torch.bfloat16)
    ref = torch.cat([F.linear(x.float(), m.weight.float(), m.bias.float()) for m in layers], -1)
    assert (FusedLinear(layers)(x).float() - ref).abs().max() < 0.1


def test_rebuilt_after_in_place_update_and_reassignment():
    layers = _layers(True)
    fused = FusedLinear(layers)
    x = torch.randn(1, 1, 512)
    with torch.no_grad():
        fused(x)  # builds the derived weights
        layers[0].weight.mul_(2)  # e.g. an optimizer step
        assert (fused(x) - torch.cat([m(x) for m in layers], -1)).abs().max() < 1e-4
        layers[1].weight = nn.Parameter(torch.randn_like(layers[1].weight))  # assign=True style
        assert (fused(x) - torch.cat([m(x) for m in layers], -1)).abs().max() < 1e-4


def test_training_bypasses_the_cache_and_keeps_gradients():
    layers = _layers(False)
    fused = FusedLinear(layers)
    x = torch.randn(1, 4, 512)
    with torch.enable_grad():  # whatever an earlier test left the global mode at
        fused(x).sum().backward()  # grad mode: plain layers, differentiable
    assert all(m.weight.grad is not None for m in layers)


@torch.no_grad()
def test_model_load_state_dict_after_use_is_seen():
    a, b = tiny_model(0), tiny_model(1)
    x = torch.randint(0, 64, (1, 6))
    a(x)  # derive a's weights
    a.load_state_dict(b.state_dict())
    assert (a(x) - b(x)).abs().max() < 1e-5


@torch.no_grad()
def test_autocast_evaluation_takes_the_plain_path():
    layers = _layers(True)
    fused = FusedLinear(layers)
    x = torch.randn(1, 5, 512)
    fused(x)  # packed weights exist
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = fused(x.bfloat16())  # as in the trainer's evaluation passes
    assert y.dtype == torch.bfloat16
    assert (y.float() - torch.cat([m(x) for m in layers], -1)).abs().max() < 0.1


def test_inference_mode_then_training_then_inference_mode_model():
    m = tiny_model(0)
    x = torch.randint(0, 64, (2, 8))
    with torch.inference_mode():
        ref = m(x)  # derived weights and rope tables first built here
    m.train()
    with torch.enable_grad():
        m(x).sum().backward()  # must not meet an inference tensor
    with torch.inference_mode():
        m2 = tiny_model(0)  # a model built under inference_mode: no version counters
        assert (m2(x) - ref).abs().max() < 1e-5
