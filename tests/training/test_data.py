import torch

from inference.training import byte_tokenizer as bt
from inference.training.corpus import (
    WindowSampler,
    heldout_prompts,
    is_heldout,
    list_source_files,
    stdlib_root,
)


def test_file_order_and_split_are_deterministic():
    files = list_source_files(stdlib_root() / "json")
    assert files == sorted(files) and "decoder.py" in files
    assert all("site-packages" not in f for f in list_source_files())
    # the split is a function of the path alone
    assert [is_heldout(f) for f in files] == [is_heldout(f) for f in list(files)]
    assert is_heldout("a/b.py", 1)


def test_byte_tokenizer_ids_are_bytes():
    tok = bt.build_byte_tokenizer()
    text = "def f(x):\n    return 'é€😀'\t\x00\r\n"
    ids = tok.encode(text).ids
    assert ids == list(text.encode("utf-8"))
    assert tok.decode(ids) == text
    assert tok.get_vocab_size() == bt.VOCAB_SIZE == 259
    assert tok.encode(bt.BOS + "a").ids == [bt.BOS_ID, 97]
    # the same tokenizer every time: byte-identical files
    assert tok.to_str() == bt.build_byte_tokenizer().to_str()


def test_sampler_and_prompts_are_seeded(small_corpus):
    a = WindowSampler(small_corpus.train.data, 16, 4, seed=1).batch()
    b = WindowSampler(small_corpus.train.data, 16, 4, seed=1).batch()
    assert a.shape == (4, 17) and torch.equal(a, b)
    p1 = heldout_prompts(small_corpus, 3, 12, seed=0)
    assert p1 == heldout_prompts(small_corpus, 3, 12, seed=0)
    assert all(len(p) == 12 and max(p) < 256 for p in p1)
    assert small_corpus.heldout.paths and not set(small_corpus.heldout.paths) & set(
        small_corpus.train.paths
    )
