"""The full demo pair, trained once per test run and shared by the tests that need it.

Training it takes minutes of both cores, so it is trained at most once per key into a cache
directory: `$TANDEM_TEST_CACHE` when set (`.ci/run` sets one outside the clone, so CI reuses a
pair the same code trained before; a developer may keep one across runs), else pytest's
cache directory in the checkout (`.pytest_cache`: a fresh clone trains once). The key is a
hash of what decides the result: the training and engine code and data files, the torch and
Python versions (the corpus is this Python's standard library). One process
trains under a file lock; the others (pytest-xdist workers) wait for it and reuse the pair.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What trains the pair: its modules, the engine and tokenizer it runs on, and the command (not
# the learned draft's modules and prompts beside them, nor the other management commands: a
# change there must not retrain it, ~6 minutes of a 2-core CI run)
_CODE = (
    "inference/training/__init__.py",
    "inference/training/demo_pair.py",
    "inference/training/byte_tokenizer.py",
    "inference/training/acceptance.py",
    "inference/training/corpus.py",
    "inference/training/fastgen.py",
    "inference/training/trainer.py",
    "inference/engine",
    "inference/text",
    "inference/management/commands/train_demo_pair.py",
)


def key() -> str:
    import torch

    digest = hashlib.sha256(f"{torch.__version__} {platform.python_version()}".encode())
    for folder in _CODE:
        where = REPO / folder
        for path in sorted(where.rglob("*")) if where.is_dir() else [where]:
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            digest.update(str(path.relative_to(REPO)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def trained_pair(cache: Path) -> Path:
    """The models directory of the full demo pair (`manage.py train_demo_pair`), trained
    into `cache` unless it is there already. Read it, never write into it."""
    from django.core.management import call_command

    from inference.training.demo_pair import pair_exists

    cache.mkdir(parents=True, exist_ok=True)
    final = cache / f"demo-pair-{key()}"
    if pair_exists(final):
        return final
    with open(cache / f"{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be training it
        if not pair_exists(final):
            partial = cache / f"{final.name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            call_command("train_demo_pair", "--out", str(partial), "--force")
            os.replace(partial, final)
    return final
