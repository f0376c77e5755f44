"""The demo corpus: the Python standard library's own ``.py`` sources.

Available on every machine, so the demo pair can be rebuilt anywhere. Files are
listed in a deterministic order (sorted relative POSIX paths) and split into
train / held-out by a hash of the relative path, so the split does not depend on
which other files a given Python build ships.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def list_source_files(root: Path | None = None) -> list[str]:
    """Relative POSIX paths of the ``.py`` files under ``root``, sorted."""
    root = Path(root) if root is not None else stdlib_root()
    out = []
    for p in root.rglob("*.py"):
        rel = p.relative_to(root)
        if EXCLUDED_DIRS.intersection(rel.parts) or not p.is_file():
            continue
        out.append(rel.as_posix())
    return sorted(out)


def is_heldout(rel_path: str, heldout_every: int = 20) -> bool:
    """Stable split: about 1/heldout_every of the files, chosen by path hash."""
    h = int.from_bytes(hashlib.sha1(rel_path.encode()).digest()[:4], "big")
    return h % heldout_every == 0


@dataclass
class Split:
    """A split's documents, UTF-8 encoded; ``data`` is their concatenation as uint8."""

    paths: list[str] = field(default_factory=list)
    docs: list[bytes] = field(default_factory=list)

    @property
    def data(self) -> np.ndarray:
        if not hasattr(self, "_data"):
            self._data = np.frombuffer(b"".join(self.docs), dtype=np.uint8)
        return self._data

    @property
    def n_bytes(self) -> int:
        return int(sum(len(d) for d in self.docs))


@dataclass
class Corpus:
    root: str
    train: Split
    heldout: Split
    sha256: str

    def describe(self) -> dict:
        return {
            "source": "python-stdlib",
            "root": self.root,
            "train_files": len(self.train.paths),
            "heldout_files": len(self.heldout.paths),
            "train_bytes": self.train.n_bytes,
            "heldout_bytes": self.heldout.n_bytes,
            "sha256": self.sha256,
        }


def load_corpus(
    root: Path | None = None,
    *,
    heldout_every: int = 20,
    max_file_bytes: int = 200_000,
) -> Corpus:
    """Read the corpus. Text is decoded as UTF-8 (invalid bytes replaced) and
    re-encoded, so token ids equal the bytes the tokenizer would produce.
    Very large files (generated tables) are skipped."""
    root = Path(root) if root is not None else stdlib_root()
    train, held = Split(), Split()
    digest = hashlib.sha256()
    for rel in list_source_files(root):
        raw = (root / rel).read_bytes()
        if not raw.strip() or len(raw) > max_file_bytes:
            continue
        doc = raw.decode("utf-8", errors="replace").encode("utf-8")
        digest.update(rel.encode() + b"\0" + hashlib.sha256(doc).digest())
        split = held if is_heldout(rel, heldout_every) else train
        split.paths.append(rel)
        split.docs.append(doc)
    return Corpus(root=str(root), train=train, heldout=held, sha256=digest.hexdigest())


class WindowSampler:
    """Random fixed-length windows from a byte stream, seeded.

    Each window starts with BOS when it starts at a document start; otherwise it is
    a plain slice (the model sees mid-document contexts too, as at inference time).
    """

    def __init__(self, data: np.ndarray, seq_len: int, batch_size: int, seed: int):
        if len(data) <= seq_len + 1:
            raise ValueError("corpus smaller than one window")
        self.data = torch.from_numpy(data.astype(np.int64))
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.gen = torch.Generator().manual_seed(seed)

    def batch(self) -> torch.Tensor:
        """A [B, seq_len + 1] LongTensor of token ids (inputs + next-token targets)."""
        n = len(self.data) - self.seq_len - 1
        starts = torch.randint(0, n, (self.batch_size,), generator=self.gen)
        idx = starts[:, None] + torch.arange(self.seq_len + 1)[None, :]
        return self.data[idx]


def heldout_prompts(
    corpus: Corpus, n: int, prompt_len: int, seed: int, min_doc_bytes: int = 0
) -> list[list[int]]:
    """``n`` prompts of ``prompt_len`` byte tokens cut from held-out files,
    deterministic for a seed."""
    g = torch.Generator().manual_seed(seed)
    docs = [d for d in corpus.heldout.docs if len(d) > max(prompt_len + 1, min_doc_bytes)]
    if not docs:
        raise ValueError("no held-out document long enough for the prompt length")
    out = []
    for _ in range(n):
        d = docs[int(torch.randint(0, len(docs), (1,), generator=g))]
        s = int(torch.randint(0, len(d) - prompt_len, (1,), generator=g))
        out.append(list(d[s : s + prompt_len]))
    return out
