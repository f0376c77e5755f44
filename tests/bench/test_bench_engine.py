"""bench_engine's logic in quick mode on a tiny random pair: runs, and writes the keys."""

import json

import pytest
import torch

from inference.engine.checkpoints import save_checkpoint
from inference.engine.config import ModelConfig
from inference.engine.transformer import Transformer
from inference.text.tokenizer import Tokenizer
from inference.training import byte_tokenizer as bt

pytest.importorskip("transformers")

KEYS = {
    "alpha",
    "mean_acceptance_length",
    "acceptance_rate",
    "c",
    "ideal_speedup",
    "speedup_vs_plain",
    "speedup_vs_hf_assisted",
    "efficiency",
    "plain_vs_hf_generate",
    "batch_sweep",
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = tmp_path_factory.mktemp("models")
    tok = Tokenizer(bt.build_byte_tokenizer(), bos_token=bt.BOS, eos_token=bt.EOS)
    for name, layers, seed in (("demo-target", 2, 0), ("demo-draft", 1, 0)):
        torch.manual_seed(seed)
        cfg = ModelConfig(
            vocab_size=bt.VOCAB_SIZE,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=layers,
            num_attention_heads=2,
            max_position_embeddings=256,
            bos_token_id=bt.BOS_ID,
            eos_token_id=bt.EOS_ID,
        )
        save_checkpoint(Transformer(cfg), tok, out / name)
    return out


def test_quick_bench_json(models, tmp_path):
    from inference.bench.engine import BenchConfig, format_table, run_bench, write_json

    cfg = BenchConfig(models / "demo-target", models / "demo-draft", prompt_len=16, k=2)
    cfg = cfg.quick_variant()
    cfg.new_tokens, cfg.sweep_ks, cfg.sweep_batches, cfg.sweep_new_tokens = 8, (1, 2), (1, 2), 4
    result = run_bench(cfg, log=lambda s: None)
    path = tmp_path / "bench.json"
    write_json(result, path)
    data = json.loads(path.read_text())
    assert KEYS <= data.keys()
    assert [e["batch"] for e in data["batch_sweep"]] == [1, 2]
    assert set(data["batch_sweep"][0]["spec"]) == {"1", "2"}
    assert data["demo"]["outputs_match"]["plain_vs_hf"]
    assert data["demo"]["outputs_match"]["spec_vs_plain"]
    assert "skipped" in data["smollm2"]
    table = format_table(result)
    assert table.count("\n|") >= 8 and "HF assisted" in table


def test_command_quick(models, tmp_path, settings):
    from django.core.management import call_command

    settings.DATA_DIR = tmp_path
    with pytest.raises(Exception, match="train_demo_pair"):
        call_command("bench_engine", "--quick")
