"""Settings fail loudly: a bad value stops the process at import, naming the variable."""

import os
import subprocess
import sys

import pytest

from tests.foundation.helpers import REPO

# The variables these tests set, removed first so the machine's own values don't interfere.
_OURS = ("DEBUG", "DATABASE_URL", "TANDEM_HEARTBEAT_PERIOD_S", "TANDEM_PRODUCTION", "SECRET_KEY")


def import_settings(tmp_path, **env):
    base = {k: v for k, v in os.environ.items() if k not in _OURS}
    return subprocess.run(
        [sys.executable, "-c", "import fleet.settings"],
        cwd=REPO,
        env={**base, "TANDEM_DATA_DIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_valid_environment_imports(tmp_path):
    result = import_settings(tmp_path, DEBUG="0", TANDEM_HEARTBEAT_PERIOD_S="5")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DEBUG", "maybe"),
        ("DATABASE_URL", "nosuchdb://somewhere/db"),
        ("DATABASE_URL", "not a url"),
        ("TANDEM_HEARTBEAT_PERIOD_S", "fast"),
        ("TANDEM_HEARTBEAT_PERIOD_S", "0"),
    ],
)
def test_bad_value_raises_improperly_configured_naming_the_variable(tmp_path, name, value):
    result = import_settings(tmp_path, **{name: value})
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("django.core.exceptions.ImproperlyConfigured:"), result.stderr
    assert name in last_line


def test_production_requires_a_secret_key(tmp_path):
    result = import_settings(tmp_path, TANDEM_PRODUCTION="1")
    assert result.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is required" in result.stderr
    assert not (tmp_path / "secret_key").exists()


def test_production_with_a_secret_key_starts(tmp_path):
    result = import_settings(tmp_path, TANDEM_PRODUCTION="1", SECRET_KEY="x" * 50)
    assert result.returncode == 0, result.stderr
