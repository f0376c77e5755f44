"""Tokenizer compatibility without tokenizers/torch: same hash as the engine's."""

import json

from tokenizers import Tokenizer, models, pre_tokenizers

from fleet.pipelines.compat import check_pair, tokenizer_hash_of_dir
from inference.text.tokenizer import tokenizer_hash


def _save(path, vocab, merges=(), added=()):
    tk = Tokenizer(models.BPE(vocab=vocab, merges=list(merges)))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel()
    if added:
        tk.add_special_tokens(list(added))
    path.mkdir(parents=True)
    tk.save(str(path / "tokenizer.json"))
    return tk


def test_hash_matches_the_engine(tmp_path):
    vocab = {"a": 0, "b": 1, "ab": 2, "Ġa": 3, "é": 4}
    tk = _save(tmp_path / "m", vocab, merges=[("a", "b")], added=["<|im_end|>"])
    assert tokenizer_hash_of_dir(tmp_path / "m") == tokenizer_hash(tk)


def test_check_pair(tmp_path):
    _save(tmp_path / "t", {"a": 0, "b": 1})
    _save(tmp_path / "d", {"a": 0, "b": 1})
    _save(tmp_path / "x", {"b": 0, "a": 1})
    assert check_pair("t", "d", models_root=tmp_path).ok
    bad = check_pair("t", "x", models_root=tmp_path)
    assert not bad.ok and "different tokenizer" in bad.reason
    unknown = check_pair("t", "nowhere", models_root=tmp_path)
    assert unknown.ok and "not checked" in unknown.reason


def test_unigram_vocab(tmp_path):
    (tmp_path / "u").mkdir()
    data = {
        "model": {"type": "Unigram", "vocab": [["<unk>", 0.0], ["a", -1.0]]},
        "added_tokens": [],
    }
    (tmp_path / "u" / "tokenizer.json").write_text(json.dumps(data))
    tk = Tokenizer.from_file(str(tmp_path / "u" / "tokenizer.json"))
    assert tokenizer_hash_of_dir(tmp_path / "u") == tokenizer_hash(tk)
