"""Which model references a pipeline may name: a directory inside the models directory
(DATA_DIR/models), or one of the known model directories listed in TANDEM_MODEL_PATHS.

Anything else (`/etc`, `../..`, a symlink out of the models directory) is refused with the
same message whether or not the path exists, before the file system is asked anything about
it, so the check is no oracle for what exists on the server.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

# A relative name: path segments of letters, digits, `.`, `_`, `-`, none starting with a dot
# (so no `..`, no hidden files).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)*")


class UnknownModel(ValueError):
    pass


def refusal(ref: str) -> str:
    return (
        f"{ref[:80]!r} is not a known model: give a directory name inside the models "
        "directory (letters, digits, '.', '_', '-', '/'), or a path listed in "
        "TANDEM_MODEL_PATHS."
    )


def models_dir() -> Path:
    return Path(settings.DATA_DIR) / "models"


def model_dir(ref: str) -> Path:
    """Where a model reference points, unchecked (a reference a pipeline already holds, so
    `resolve` accepted it): a directory under DATA_DIR/models, or an absolute path. Used by
    the node workers (loading) and the control plane alike."""
    path = Path(ref)
    return path if path.is_absolute() else models_dir() / ref


def known_paths() -> list[Path]:
    return [Path(p).resolve() for p in settings.MODEL_PATHS]


def resolve(ref: str) -> Path:
    """The directory a model reference names; raises UnknownModel for anything outside
    the models directory and the known model paths."""
    if not isinstance(ref, str) or not ref or "\x00" in ref or len(ref) > 300:
        raise UnknownModel(refusal(str(ref)))
    if Path(ref).is_absolute():
        path = Path(ref).resolve()
        if path in known_paths():
            return path
        raise UnknownModel(refusal(ref))
    if not _NAME.fullmatch(ref):
        raise UnknownModel(refusal(ref))
    root = models_dir().resolve()
    path = (root / ref).resolve()  # follows symlinks: one pointing out is refused below
    if not path.is_relative_to(root) or path == root:
        raise UnknownModel(refusal(ref))
    return path
