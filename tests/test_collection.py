"""The suite's collection: every test has its own node id, so pytest-xdist (which schedules by
node id) runs every one of them. Schemathesis gave its 63 operations one id; under `-n 2` 62
were dropped without an error."""

import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_collected_test_has_its_own_node_id():
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--co",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/hardening/test_schema_fuzz.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    assert len(ids) > 40, listed.stdout[-2000:]  # one per operation of the REST schema
    assert [i for i, n in Counter(ids).items() if n > 1] == []
