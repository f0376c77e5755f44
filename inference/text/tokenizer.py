"""A thin wrapper over ``tokenizers.Tokenizer`` with special ids, a chat prompt, and a content
hash (``tokenizer_hash``) so drafters and verifiers can prove they speak the same ids."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer

from inference.text import chat_prompts


class Tokenizer:
    def __init__(
        self,
        tk: _HFTokenizer,
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        chat_template: str | None = None,
    ) -> None:
        self.tk, self.bos_token, self.eos_token = tk, bos_token, eos_token
        self.chat_template = chat_template
        self._hash: str | None = None
        self._chatml: bool | None = None

    # -- ids ---------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.tk.get_vocab_size(with_added_tokens=True)

    @property
    def bos_id(self) -> int | None:
        return self.tk.token_to_id(self.bos_token) if self.bos_token else None

    @property
    def eos_id(self) -> int | None:
        return self.tk.token_to_id(self.eos_token) if self.eos_token else None

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        return self.tk.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], *, skip_special_tokens: bool = True) -> str:
        return self.tk.decode(list(ids), skip_special_tokens=skip_special_tokens)

    @property
    def chatml(self) -> bool:
        """Does the vocabulary hold ChatML's markers (the fallback when no template)?"""
        if self._chatml is None:
            self._chatml = chat_prompts.knows_chatml(self.tk)
        return self._chatml

    def chat_prompt(
        self, messages: list[dict[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        """The model's own chat template, else ChatML, else a plain transcript (one renderer
        for the engine, the workers and the web side), by default ending with the
        assistant's turn opened."""
        return chat_prompts.render(
            messages,
            template=self.chat_template,
            chatml=self.chatml,
            add_generation_prompt=add_generation_prompt,
        )

    @property
    def hash(self) -> str:
        if self._hash is None:
            self._hash = tokenizer_hash(self)
        return self._hash

    # -- files -------------------------------------------------------------------------
    @classmethod
    def from_dir(cls, path: str | Path) -> Tokenizer:
        path = Path(path)
        tk = _HFTokenizer.from_file(str(path / "tokenizer.json"))
        cfg_path = path / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}

        def _tok(v):  # tokenizer_config stores either "<s>" or {"content": "<s>", ...}
            return v.get("content") if isinstance(v, dict) else v

        return cls(
            tk,
            bos_token=_tok(cfg.get("bos_token")),
            eos_token=_tok(cfg.get("eos_token")),
            chat_template=cfg.get("chat_template"),
        )

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.tk.save(str(path / "tokenizer.json"))
        cfg: dict[str, str | bool | None] = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": self.bos_token,
        }
        cfg |= {"eos_token": self.eos_token, "clean_up_tokenization_spaces": False}
        if self.chat_template:
            cfg["chat_template"] = self.chat_template
        (path / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))


def tokenizer_hash(tok: Tokenizer | _HFTokenizer) -> str:
    """sha256 over the id<->token mapping (added tokens included): equal hashes mean a token
    id means the same string on both sides, which is all speculative decoding needs."""
    tk = tok.tk if isinstance(tok, Tokenizer) else tok
    vocab = sorted(tk.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()[:16]
