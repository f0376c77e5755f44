"""One copy of every weight after load, and KV cache sizing from a memory budget."""

import pytest
import torch

from inference.engine.checkpoints import build_model, load_checkpoint, save_checkpoint
from inference.engine.engines import VerifyEngine
from inference.engine.generator import generate
from inference.engine.memory import KVBudgetTooSmall, kv_bytes_per_token, plan_kv, weights_memory
from inference.engine.sampling import SamplingParams
from tests.engine.helpers import tiny_config, tiny_model

PROMPTS = [[3, 4, 5, 6], [7, 8, 9, 10, 11, 12]]
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def _unfused_reference(model, x):
    """The separate layers' own matmuls (the differentiable path), no fused weights."""
    with torch.enable_grad():
        return model(x).detach()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_loaded_model_holds_one_copy_of_every_weight(tmp_path, dtype):
    src = tiny_model(0, std=0.3)
    save_checkpoint(src, None, tmp_path)
    model, _ = load_checkpoint(tmp_path, dtype=dtype)
    x = torch.tensor([PROMPTS[1]])
    with torch.no_grad():
        out = model(x)  # builds the fused weights
    mem = weights_memory(model)
    assert mem["ratio"] <= 1.05, mem
    # the fused q/k/v weight is the parameters' own memory
    attn = model.model.decoder_layers()[0].self_attn
    assert attn.qkv.weight.data_ptr() == attn.q_proj.weight.data_ptr()
    assert (
        attn.qkv.weight.untyped_storage().data_ptr()
        == attn.v_proj.weight.untyped_storage().data_ptr()
    )
    ref = _unfused_reference(model, x)
    assert torch.equal(out.argmax(-1), ref.argmax(-1))
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    assert (out.float() - ref.float()).abs().max() <= tol * max(1.0, ref.float().abs().max())


def test_outputs_unchanged_and_state_dict_intact(tmp_path):
    src = tiny_model(0, std=0.3)
    save_checkpoint(src, None, tmp_path)
    model, _ = load_checkpoint(tmp_path)
    for name, t in src.state_dict().items():
        assert torch.equal(model.state_dict()[name], t), name
    a = generate(VerifyEngine(src, n_slots=2, max_len=32), PROMPTS, GREEDY)
    b = generate(VerifyEngine(model, n_slots=2, max_len=32), PROMPTS, GREEDY)
    assert [o.token_ids for o in a] == [o.token_ids for o in b]


def test_training_updates_reach_the_fused_weights():
    """An optimizer step on the views changes the inference output (no stale copy), and
    gradients flow into each separate parameter."""
    m = tiny_model(0, std=0.3)
    x = torch.tensor([PROMPTS[1]])
    with torch.no_grad():
        before = m(x).clone()
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    m.train()
    with torch.enable_grad():  # a worker loader earlier in the suite turns grad off process-wide
        m(x).logsumexp(-1).sum().backward()
    assert m.model.decoder_layers()[0].self_attn.k_proj.weight.grad is not None
    opt.step()
    m.eval()
    with torch.no_grad():
        after = m(x)
    assert not torch.allclose(before, after)
    assert torch.allclose(after, _unfused_reference(m, x), atol=1e-5)
    assert weights_memory(m)["ratio"] <= 1.05


def test_to_then_fuse_again():
    m = tiny_model(0).to(torch.bfloat16)  # .to copies each parameter on its own
    with torch.no_grad():
        m(torch.tensor([PROMPTS[0]]))
    assert weights_memory(m)["ratio"] > 1.3  # the fused copy made for separate tensors
    m.fuse_weights_()
    with torch.no_grad():
        m(torch.tensor([PROMPTS[0]]))
    assert weights_memory(m)["ratio"] <= 1.05


def test_build_model_from_state_dict_frees_the_separate_tensors():
    src = tiny_model(0)
    m = build_model(src.config, {k: v.clone() for k, v in src.state_dict().items()})
    with torch.no_grad():
        m(torch.tensor([PROMPTS[0]]))
    assert weights_memory(m)["ratio"] <= 1.05


# -- KV cache from a budget ----------------------------------------------------------------------


def test_plan_kv_uses_the_context_not_max_position_embeddings():
    c = tiny_config(max_position_embeddings=131072)
    per_tok = kv_bytes_per_token(c, torch.float32)
    assert per_tok == 2 * 2 * 2 * 8 * 4
    plan = plan_kv(
        c, torch.float32, "cpu", context=256, max_slots=64, budget_bytes=per_tok * 256 * 11
    )
    assert (plan.max_len, plan.n_slots) == (256, 10)  # 10 slots + the scratch slot
    assert plan.cache_bytes <= plan.budget_bytes
    big = plan_kv(c, torch.float32, "cpu", context=256, max_slots=8, budget_bytes=1 << 30)
    assert big.n_slots == 8
    capped = plan_kv(
        tiny_config(), torch.float32, "cpu", context=10_000, max_slots=4, budget_bytes=1 << 30
    )
    assert capped.max_len == 128  # the model's own limit


def test_plan_kv_from_free_memory_and_errors():
    c = tiny_config()
    plan = plan_kv(c, torch.float32, "cpu", context=128, max_slots=3, memory_fraction=0.01)
    assert plan.n_slots == 3 and plan.budget_bytes > 0
    with pytest.raises(KVBudgetTooSmall, match="holds no slot"):
        plan_kv(c, torch.float32, "cpu", context=128, max_slots=3, budget_bytes=1000)
    with pytest.raises(ValueError, match="fraction"):
        plan_kv(c, torch.float32, "cpu", context=128, max_slots=3, memory_fraction=1.5)


def test_engine_reports_kv_capacity_and_usage():
    m = tiny_model(0)
    v = VerifyEngine(m, n_slots=3, max_len=32)
    v.add("a", [3, 4, 5], SamplingParams(temperature=0, max_tokens=8))
    kv = v.kv_stats()
    per_tok = kv_bytes_per_token(m.config, torch.float32)
    assert kv["n_slots"] == 3 and kv["max_len"] == 32 and kv["slots_used"] == 1
    assert kv["capacity_tokens"] == 96 and kv["used_tokens"] == 3
    assert kv["cache_bytes"] == 4 * 32 * per_tok


def test_worker_sizes_the_cache_from_the_node_budget(monkeypatch):
    from inference.engine.kv_cache import DEFAULT_MAX_LEN
    from inference.worker import engine_cache  # Django settings: kept out of gpu_check.sh by name

    assert engine_cache.DEFAULT_CONTEXT == DEFAULT_MAX_LEN
    m = tiny_model(0, max_position_embeddings=131072)
    per_tok = kv_bytes_per_token(m.config, torch.float32)
    for name in ("TANDEM_NODE_MAX_LEN", "TANDEM_KV_BYTES", "TANDEM_KV_MEMORY_FRACTION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TANDEM_NODE_SLOTS", "64")
    monkeypatch.setenv("TANDEM_KV_BYTES", str(per_tok * engine_cache.DEFAULT_CONTEXT * 6))
    assert engine_cache.cache_shape(m) == {"n_slots": 5, "max_len": engine_cache.DEFAULT_CONTEXT}
    monkeypatch.setenv("TANDEM_NODE_MAX_LEN", "100")
    monkeypatch.setenv("TANDEM_KV_BYTES", str(per_tok * 100 * 1000))
    assert engine_cache.cache_shape(m) == {"n_slots": 64, "max_len": 100}


def test_default_cache_length_is_not_max_position_embeddings():
    from inference.engine.kv_cache import DEFAULT_MAX_LEN, KVCache

    m = tiny_model(0, max_position_embeddings=131072)
    assert KVCache.for_model(m, 1).max_len == DEFAULT_MAX_LEN == 4096
    assert KVCache.for_model(tiny_model(0), 1).max_len == 128
