"""pytest plugin (loaded with `-p`, before pytest-django imports the settings).

Gives the test run its own data directory and, when no REDIS_URL is configured, its own
embedded Redis, so the suite talks to a real Redis without depending on the machine's.
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from fleet.runtime.embedded_redis import EmbeddedRedis

if "TANDEM_DATA_DIR" not in os.environ:
    _data_dir = Path(tempfile.mkdtemp(prefix="tandem-test-"))
    os.environ["TANDEM_DATA_DIR"] = str(_data_dir)
    atexit.register(shutil.rmtree, _data_dir, True)

# The node workers' start-up cost sweep (inference/worker/cost_sweep.py): short in tests.
os.environ.setdefault("TANDEM_COST_SWEEP_S", "0.5")
# `up` under test trains no learned draft in the background (ten minutes of both cores);
# the tests of that job switch it on themselves.
os.environ.setdefault("TANDEM_LEARNED_DRAFTS", "0")

if not os.environ.get("REDIS_URL"):
    _server = EmbeddedRedis(Path(os.environ["TANDEM_DATA_DIR"]), record=False)
    os.environ["REDIS_URL"] = _server.start()
    atexit.register(_server.stop)
