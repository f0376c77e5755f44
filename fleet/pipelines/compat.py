"""Draft/target compatibility: both must map token ids to the same strings.

Reimplements the engine's ``tokenizer_hash`` (inference/text/tokenizer.py) with json and
hashlib only, so the web process checks compatibility without importing tokenizers or torch:
sha256 over the (token, id) pairs of the vocabulary plus added tokens, sorted by id.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path


class TokenizerUnavailable(Exception):
    pass


def resolve_model_dir(ref: str, models_root: Path | None = None) -> Path:
    """A model reference's directory, confined to the models directory and the known model
    paths (`model_refs`; raises its UnknownModel). `models_root`: another models
    directory (tests)."""
    if models_root is None:
        from fleet.pipelines.model_refs import resolve

        return resolve(ref)
    return models_root / ref


def vocab_of(tokenizer_json: dict) -> dict[str, int]:
    """token -> id, as ``tokenizers.Tokenizer.get_vocab(with_added_tokens=True)``."""
    model = tokenizer_json.get("model") or {}
    raw = model.get("vocab")
    vocab: dict[str, int] = {}
    if isinstance(raw, dict):  # BPE, WordPiece, WordLevel
        vocab.update({str(tok): int(i) for tok, i in raw.items()})
    elif isinstance(raw, list):  # Unigram: [[piece, score], ...], id = index
        vocab.update({str(entry[0]): i for i, entry in enumerate(raw)})
    for added in tokenizer_json.get("added_tokens") or []:
        vocab[str(added["content"])] = int(added["id"])
    return vocab


def hash_vocab(vocab: dict[str, int]) -> str:
    pairs = sorted(vocab.items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode()).hexdigest()[:16]


def tokenizer_hash_of_dir(path: Path) -> str:
    file = Path(path) / "tokenizer.json"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise TokenizerUnavailable(f"no tokenizer.json in {path}") from exc
    except (OSError, ValueError) as exc:
        raise TokenizerUnavailable(f"unreadable tokenizer.json in {path}: {exc}") from exc
    return hash_vocab(vocab_of(data))


@dataclass(frozen=True)
class Compatibility:
    ok: bool
    reason: str = ""
    target_hash: str | None = None
    draft_hash: str | None = None


def check_pair(
    target_model: str, draft_model: str, *, models_root: Path | None = None
) -> Compatibility:
    """Are these two model directories usable as target and draft of one pipeline?

    Refused only on evidence: both tokenizers readable and their hashes differ. A model whose
    directory is missing here (it may live only on the worker machines) is accepted, with the
    reason saying the check could not be made."""
    try:
        t = tokenizer_hash_of_dir(resolve_model_dir(target_model, models_root))
        d = tokenizer_hash_of_dir(resolve_model_dir(draft_model, models_root))
    except ValueError as exc:  # UnknownModel: a row written outside the API (e.g. a test)
        return Compatibility(True, f"not checked here: {exc}")
    except TokenizerUnavailable as exc:
        return Compatibility(True, f"not checked here: {exc}")
    if t != d:
        return Compatibility(
            False,
            f"draft model {draft_model!r} uses a different tokenizer than target "
            f"{target_model!r} (vocabulary hash {d} vs {t}): token ids would not match.",
            t,
            d,
        )
    return Compatibility(True, "same tokenizer", t, d)
