"""The data directory is 0700 and the files holding secrets 0600: the SQLite database with
its WAL and SHM, the generated secret key, the embedded Redis' files, the first-run password
(which reaches stdout only when a person reads it on a terminal)."""

import io
import json
import os
import stat
import subprocess
import sys

from fleet.console.management.commands.up import PASSWORD_FILE, Command
from fleet.datadir import write_private
from fleet.runtime.embedded_redis import EmbeddedRedis
from tests.foundation.helpers import REPO

# In a fresh process (settings are read once per process): open the database, write to it so
# the WAL and SHM exist, and report the modes while the connection is open.
_PROBE = """
import json, os, stat, django
django.setup()
from django.conf import settings
from django.db import connection
with connection.cursor() as c:
    c.execute("CREATE TABLE IF NOT EXISTS probe (x)")
    c.execute("INSERT INTO probe VALUES (1)")
d = settings.DATA_DIR
names = ["", "tandem.sqlite3", "tandem.sqlite3-wal", "tandem.sqlite3-shm", "secret_key"]
print(json.dumps({n: stat.S_IMODE(os.stat(d / n).st_mode) for n in names}))
"""


def _probe(data_dir) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DATABASE_URL")}
    env.update(TANDEM_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="fleet.settings")
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_new_data_directory_and_its_database_and_key_are_private(tmp_path):
    modes = _probe(tmp_path / "fresh" / "data")
    assert modes == {
        "": 0o700,
        "tandem.sqlite3": 0o600,
        "tandem.sqlite3-wal": 0o600,
        "tandem.sqlite3-shm": 0o600,
        "secret_key": 0o600,
    }


def test_an_older_install_readable_by_everyone_is_narrowed(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    for name in ("tandem.sqlite3", "tandem.sqlite3-wal", "tandem.sqlite3-shm"):
        (data / name).touch()
        (data / name).chmod(0o644)
    assert set(_probe(data).values()) <= {0o700, 0o600}


def test_the_embedded_redis_files_are_private(tmp_path):
    with EmbeddedRedis(tmp_path, record=True):
        run_dir = tmp_path / "redis"
        assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE((run_dir / "url").stat().st_mode) == 0o600
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in run_dir.iterdir())


def test_write_private_narrows_an_existing_file(tmp_path):
    path = tmp_path / "x"
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o600


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _announce(stdout) -> str:
    command = Command(stdout=stdout)
    command._announce("127.0.0.1", 8000, "s3cret-first-run-password")
    return stdout.getvalue()


def test_the_first_run_password_is_not_printed_to_a_captured_stdout(settings):
    captured = _announce(io.StringIO())
    assert "s3cret-first-run-password" not in captured
    assert str(settings.DATA_DIR / PASSWORD_FILE) in captured  # says where to find it
    assert "s3cret-first-run-password" in _announce(_Terminal())


def test_the_embedded_redis_needs_its_password(tmp_path):
    """Loopback is reachable by every local user: without the URL's password, nothing."""
    import pytest
    import redis

    with EmbeddedRedis(tmp_path, record=True) as url:
        assert redis.Redis.from_url(url).ping()
        bare = url.split("@", 1)[1]
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(f"redis://{bare}").get("tandem:any")
        assert not (tmp_path / "redis" / "redis.conf").exists()
