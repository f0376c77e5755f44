"""What `manage.py up`'s supervisor tells the console: its children's state, in one file.

The supervisor (fleet/runtime/launcher.py) rewrites `<DATA_DIR>/supervisor.json` whenever a child
starts, dies, is restarted or is given up on, and removes it when `up` stops. The web
process reads it for the console banner and `GET /api/v1/processes`. A file rather than
Redis: it is there for exactly as long as the supervisor, and it still tells the story when
the child that died is the embedded Redis's neighbour, or Redis itself is in trouble.
Without `up` (compose, a fleet) there is no file and nothing to show.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

STATE_FILE = "supervisor.json"

# A child's states. RUNNING: its process is alive. RESTARTING: it died and waits out its
# backoff. FAILED: it died too often; the supervisor gave up and keeps the others running.
# DONE: a one-shot job (ChildSpec.oneshot) that finished its work.
RUNNING, RESTARTING, FAILED, DONE = "running", "restarting", "failed", "done"
PROBLEM_STATES = frozenset({RESTARTING, FAILED})


def state_path(data_dir) -> Path:
    return Path(data_dir) / STATE_FILE


def write_state(path: Path, state: dict) -> None:
    """Atomically (write + rename), readable by this user only."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".supervisor-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(state, out)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_state(data_dir) -> dict | None:
    """The supervisor's last report, or None when no supervisor runs here."""
    try:
        state = json.loads(state_path(data_dir).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def problems(data_dir) -> list[dict]:
    """Children that are not running (restarting or given up on), failed ones first."""
    state = read_state(data_dir) or {}
    children = [c for c in state.get("children", []) if c.get("state") in PROBLEM_STATES]
    return sorted(children, key=lambda c: (c.get("state") != FAILED, c.get("name", "")))
