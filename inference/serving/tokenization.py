"""Web-side tokenization: count and encode prompts with the `tokenizers` library only.

The web process never imports torch, so it cannot use `inference.engine`. It still has to
know a prompt's token ids (the workers take ids, not text) and the model's context length
(to refuse a prompt that does not fit) before a generation is written. Both come from the
pipeline's target model directory: `tokenizer.json` and `config.json`
(`max_position_embeddings`). One loaded tokenizer per model path, kept for the process.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from fleet.pipelines.model_refs import model_dir
from inference.text import chat_prompts
from inference.text.tokenizer import Tokenizer


class TokenizerUnavailable(Exception):
    """The model directory has no usable tokenizer.json / config.json."""


class ModelTokenizer(Tokenizer):
    """The text room's tokenizer (one class for engine, workers and web) with what the web
    side needs beside it: the model directory and its context length."""

    def __init__(
        self, path: Path, tk: HFTokenizer, context_length: int, chat_template: str | None = None
    ) -> None:
        super().__init__(tk, chat_template=chat_template)
        self.path, self.context_length = path, context_length


_cache: dict[tuple[str, float, float], ModelTokenizer] = {}
_lock = threading.Lock()


def load(reference: str) -> ModelTokenizer:
    """The tokenizer of a model directory, cached per path (reloaded if its files change)."""
    path = model_dir(reference)
    tok_file, cfg_file = path / "tokenizer.json", path / "config.json"
    try:
        key = (str(path), tok_file.stat().st_mtime, cfg_file.stat().st_mtime)
    except OSError as exc:
        raise TokenizerUnavailable(
            f"model {reference!r} has no tokenizer.json and config.json at {path}"
        ) from exc
    cached = _cache.get(key)
    if cached is not None:
        return cached
    with _lock:
        cached = _cache.get(key)
        if cached is None:
            cached = _cache[key] = _read(path, tok_file, cfg_file)
    return cached


def _read(path: Path, tok_file: Path, cfg_file: Path) -> ModelTokenizer:
    try:
        tk = HFTokenizer.from_file(str(tok_file))
        config = json.loads(cfg_file.read_text())
        context = int(config.get("max_position_embeddings") or 0)
    except Exception as exc:  # OSError, JSON errors, and tokenizers' plain Exception
        raise TokenizerUnavailable(f"cannot read the tokenizer at {path}: {exc}") from exc
    if context <= 0:
        raise TokenizerUnavailable(f"{cfg_file} has no max_position_embeddings")
    template = None
    if (path / "tokenizer_config.json").exists():
        try:
            template = json.loads((path / "tokenizer_config.json").read_text()).get("chat_template")
            if template is not None:
                chat_prompts.compiled(template)
        except Exception as exc:  # JSON and Jinja syntax errors
            raise TokenizerUnavailable(f"cannot read the chat template at {path}: {exc}") from exc
    return ModelTokenizer(path, tk, context, template if isinstance(template, str) else None)
