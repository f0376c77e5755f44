"""The demo pair's cache key (tests/demo_pair.py) covers every project module its training
imports: a change to one of them must train the pair again, not reuse a stale one."""

import os
import subprocess
import sys
from pathlib import Path

from tests.demo_pair import _CODE, REPO

LIST_MODULES = (
    "import sys, inference.training.demo_pair; "
    "print('\\n'.join(m.__file__ for m in list(sys.modules.values()) "
    "if getattr(m, '__file__', None)))"
)


def test_the_cache_key_covers_every_module_the_training_imports():
    listed = subprocess.run(
        [sys.executable, "-c", LIST_MODULES],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    ours = {
        str(Path(f).relative_to(REPO))
        for f in listed.stdout.split()
        if Path(f).is_relative_to(REPO / "inference") and f != str(REPO / "inference/__init__.py")
    }
    assert "inference/training/demo_pair.py" in ours
    outside = sorted(f for f in ours if not any(f == c or f.startswith(c + "/") for c in _CODE))
    assert outside == []
