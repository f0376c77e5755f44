"""Tiny random models and a word-level tokenizer for fast engine tests."""

import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers.decoders import WordPiece
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit

from inference.engine.config import ModelConfig
from inference.engine.transformer import Transformer
from inference.text.tokenizer import Tokenizer


def tiny_config(vocab_size: int = 64, **kw) -> ModelConfig:
    base = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=None,
        eos_token_id=None,
    )
    return ModelConfig(**(base | kw))


def tiny_model(seed: int = 0, vocab_size: int = 64, std: float = 0.02, **kw) -> Transformer:
    """A random model; a larger ``std`` makes its distributions far from uniform."""
    torch.manual_seed(seed)
    m = Transformer(tiny_config(vocab_size, **kw))
    for p in m.parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=std)
    return m.eval()


def word_tokenizer(vocab_size: int = 64) -> Tokenizer:
    """Ids 0..V-1 are the words w0..w{V-1}; w1 is EOS."""
    vocab = {f"w{i}": i for i in range(vocab_size)}
    tk = HFTokenizer(WordLevel(vocab, unk_token="w0"))
    tk.pre_tokenizer = WhitespaceSplit()
    tk.decoder = WordPiece(prefix="##")  # joins words with spaces
    return Tokenizer(tk, bos_token="w0", eos_token="w1")
