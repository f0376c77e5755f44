"""pytest plugin (loaded with `-p`, before pytest-django imports the settings).

Gives the test run its own data directory and, when no REDIS_URL is configured, its own
embedded Redis, so the suite talks to a real Redis without depending on the machine's.

Under pytest-xdist every worker gets its own of both: workers inherit the controller's
environment, and two workers sharing one Redis would see each other's keys, streams and
node ACL users (the same node ids in their two test databases). A REDIS_URL given from
outside is split by database number instead (ACL users stay shared there).
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from fleet.runtime.embedded_redis import EmbeddedRedis

_OURS = "TANDEM_TEST_PLUMBING"  # the variables below that this plugin set, comma-separated
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")

if _WORKER:  # an xdist worker: what the controller set up is not this worker's
    for name in filter(None, os.environ.pop(_OURS, "").split(",")):
        os.environ.pop(name, None)
    if os.environ.get("REDIS_URL"):
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(os.environ["REDIS_URL"])
        base = int(parts.path.strip("/") or 0)
        index = int(_WORKER[2:]) if _WORKER[2:].isdigit() else 0
        os.environ["REDIS_URL"] = urlunsplit(parts._replace(path=f"/{base + 1 + index}"))

_set: list[str] = []

if "TANDEM_DATA_DIR" not in os.environ:
    _data_dir = Path(tempfile.mkdtemp(prefix=f"tandem-test-{_WORKER}"))
    os.environ["TANDEM_DATA_DIR"] = str(_data_dir)
    atexit.register(shutil.rmtree, _data_dir, True)
    _set.append("TANDEM_DATA_DIR")

# The node workers' start-up cost sweep (inference/worker/cost_sweep.py): short in tests.
os.environ.setdefault("TANDEM_COST_SWEEP_S", "0.5")
# `up` under test trains no learned draft in the background (ten minutes of both cores);
# the tests of that job switch it on themselves.
os.environ.setdefault("TANDEM_LEARNED_DRAFTS", "0")

if not os.environ.get("REDIS_URL"):
    _server = EmbeddedRedis(Path(os.environ["TANDEM_DATA_DIR"]), record=False)
    os.environ["REDIS_URL"] = _server.start()
    atexit.register(_server.stop)
    _set.append("REDIS_URL")

if _set:
    os.environ[_OURS] = ",".join(_set)
