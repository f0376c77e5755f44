"""The demo pair's code path on the tiny preset (seconds); the full run is marked slow."""

import json

import pytest
import torch

from inference.engine.checkpoints import load_checkpoint
from inference.engine.engines import check_compatible
from inference.training import byte_tokenizer as bt
from inference.training.demo_pair import DRAFT_NAME, MANIFEST, TARGET_NAME, pair_exists

FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def test_tiny_pair_files_and_manifest(tiny_pair):
    out, manifest = tiny_pair
    assert pair_exists(out)
    for name in (TARGET_NAME, DRAFT_NAME):
        for f in FILES:
            assert (out / name / f).is_file(), (name, f)
        cfg = json.loads((out / name / "config.json").read_text())
        assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
        assert (cfg["vocab_size"], cfg["bos_token_id"], cfg["eos_token_id"]) == (259, 256, 257)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        assert (out / TARGET_NAME / f).read_bytes() == (out / DRAFT_NAME / f).read_bytes()
    on_disk = json.loads((out / MANIFEST).read_text())
    assert on_disk == json.loads(json.dumps(manifest))
    assert on_disk["seed"] == 3
    assert on_disk["tokenizer"]["tokenizer_json_sha256"] == bt.file_sha256(
        out / TARGET_NAME / "tokenizer.json"
    )
    assert on_disk["target"]["params"] > on_disk["draft"]["params"] > 0
    greedy = on_disk["heldout"]["greedy"]
    assert greedy["k"] == 4 and greedy["rounds"] > 0 and 0 <= greedy["acceptance_rate"] <= 1
    assert on_disk["train_seconds"] >= 0 and on_disk["corpus"]["heldout_files"] > 0


def test_tiny_pair_loads_in_our_engine_with_one_tokenizer(tiny_pair):
    out, _ = tiny_pair
    target, ttok = load_checkpoint(out / TARGET_NAME)
    draft, dtok = load_checkpoint(out / DRAFT_NAME)
    assert ttok is not None and dtok is not None
    assert ttok.hash == dtok.hash
    assert (ttok.bos_id, ttok.eos_id) == (bt.BOS_ID, bt.EOS_ID)
    assert ttok.encode("def f():") == list(b"def f():")
    check_compatible(
        {"vocab_size": draft.config.vocab_size, "tokenizer_hash": dtok.hash},
        {"vocab_size": target.config.vocab_size, "tokenizer_hash": ttok.hash},
    )


def test_tiny_pair_loads_in_transformers(tiny_pair):
    transformers = pytest.importorskip("transformers")
    out, _ = tiny_pair
    x = torch.tensor([list(b"import os\n")])
    for name in (TARGET_NAME, DRAFT_NAME):
        hf = transformers.AutoModelForCausalLM.from_pretrained(out / name).eval()
        ours, _ = load_checkpoint(out / name)
        with torch.no_grad():
            torch.testing.assert_close(hf(x).logits, ours(x), rtol=1e-4, atol=1e-4)
        tok = transformers.AutoTokenizer.from_pretrained(out / name)
        assert tok("def x").input_ids == list(b"def x")
        assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (256, 257, 258)


def test_training_is_seeded(tmp_path, small_corpus, tiny_pair):
    from inference.training.demo_pair import train_demo_pair

    _, first = tiny_pair
    again = train_demo_pair(tmp_path, seed=3, preset="tiny", threads=1, corpus=small_corpus)
    assert again["target"]["train"]["final_loss"] == first["target"]["train"]["final_loss"]
    assert again["heldout"] == first["heldout"]
    a = (tmp_path / TARGET_NAME / "model.safetensors").read_bytes()
    assert a == (tiny_pair[0] / TARGET_NAME / "model.safetensors").read_bytes()


def test_command_writes_into_data_dir_and_skips_existing(tmp_path, settings):
    from django.core.management import call_command

    settings.DATA_DIR = tmp_path
    call_command("train_demo_pair", "--preset", "tiny", "--seed", "1", "--threads", "1")
    models = tmp_path / "models"
    assert pair_exists(models)
    stamp = (models / MANIFEST).stat().st_mtime_ns
    call_command("train_demo_pair", "--preset", "tiny")  # exists: nothing to do
    assert (models / MANIFEST).stat().st_mtime_ns == stamp
    call_command("train_demo_pair", "--preset", "tiny", "--force", "--out", str(tmp_path / "o"))
    assert pair_exists(tmp_path / "o")


@pytest.mark.slow
@pytest.mark.demo_train
@pytest.mark.timeout(2700)  # trained in the `demo_pair` fixture on first use: 21 min in CI
def test_full_demo_pair(demo_pair):
    """The real command (~6 min on 2 idle CPU cores; trained once per run by the fixture):
    the acceptance requirement. The 10-minute budget holds on an idle machine; on a shared one
    wall time stretches, so it is not asserted here (the manifest records wall and CPU
    seconds)."""
    assert pair_exists(demo_pair)
    m = json.loads((demo_pair / MANIFEST).read_text())
    assert m["heldout"]["greedy"]["acceptance_rate"] >= 0.6
    assert m["target"]["params"] > 5e6 and m["draft"]["params"] < 1e6
